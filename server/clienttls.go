package server

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/rotor-lb/rotor/config"
)

// clientTLS turns a config's client TLS section (state.tls, a pool's tls)
// into a tls.Config, reading its files now; field names the section in
// errors. The digest covers everything it was made from (the files'
// bytes and the server name), so that what was made with it is kept
// across a reload until one of them changes.
func clientTLS(field string, t *config.ClientTLS) (*tls.Config, [sha256.Size]byte, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	sum := sha256.New()
	fmt.Fprintf(sum, "server_name=%q\n", t.ServerName)
	read := func(sub, path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, sub, err)
		}
		fmt.Fprintf(sum, "%s=%d\n", sub, len(b))
		sum.Write(b)
		return b, nil
	}
	var digest [sha256.Size]byte
	if t.CA != "" {
		pem, err := read("ca", t.CA)
		if err != nil {
			return nil, digest, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, digest, fmt.Errorf("%s.ca: %s: no PEM certificate in it", field, t.CA)
		}
	}
	if t.Cert != "" {
		certPEM, err := read("cert", t.Cert)
		if err != nil {
			return nil, digest, err
		}
		keyPEM, err := read("key", t.Key)
		if err != nil {
			return nil, digest, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, digest, fmt.Errorf("%s: cert %s and key %s: %w", field, t.Cert, t.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	copy(digest[:], sum.Sum(nil))
	return cfg, digest, nil
}
