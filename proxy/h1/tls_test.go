package h1

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// SelfSignedTLS returns a server's TLS config with a self-signed
// certificate, and a client's that trusts it and offers HTTP/1.1: for
// the tests inside the package and outside it (h1_test).
func SelfSignedTLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	certPEM, keyPEM := testtool.SelfSigned(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}},
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
}

// DialOver connects to addr, over TLS with cfg when it is not nil.
func DialOver(addr string, cfg *tls.Config) (net.Conn, error) {
	if cfg != nil {
		return tls.Dial("tcp", addr, cfg)
	}
	return net.Dial("tcp", addr)
}
