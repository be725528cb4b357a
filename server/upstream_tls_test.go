package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/server"
)

// testCA is a certificate authority of a test's own, issuing server and
// client certificates into its directory.
type testCA struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string // the CA certificate's file
	n    int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca := &testCA{t: t, dir: t.TempDir()}
	ca.key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rotor test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	ca.cert, _ = x509.ParseCertificate(der)
	ca.pem = ca.write("ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(name, typ string, der []byte) string {
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return path
}

// issue makes a certificate for name (a DNS name), for a server or a
// client, and returns it with the files of it and its key.
func (ca *testCA) issue(name string, usage x509.ExtKeyUsage) (tls.Certificate, string, string) {
	ca.t.Helper()
	ca.n++
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.n + 1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{name}, ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile := ca.write(fmt.Sprintf("%s-%d.pem", name, ca.n), "CERTIFICATE", der)
	keyFile := ca.write(fmt.Sprintf("%s-%d.key", name, ca.n), "EC PRIVATE KEY", kb)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		ca.t.Fatal(err)
	}
	return pair, certFile, keyFile
}

// httpsBackend serves "secure" over TLS with a certificate for
// backend.internal from ca (and no IP address in it); requireClient asks
// every client for a certificate from ca.
func httpsBackend(t *testing.T, ca *testCA, requireClient bool) *httptest.Server {
	t.Helper()
	cert, _, _ := ca.issue("backend.internal", x509.ExtKeyUsageServerAuth)
	b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "plain", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, "secure")
	}))
	b.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	if requireClient {
		pool := x509.NewCertPool()
		pool.AddCert(ca.cert)
		b.TLS.ClientAuth, b.TLS.ClientCAs = tls.RequireAndVerifyClientCert, pool
	}
	b.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes the test makes on purpose
	b.StartTLS()
	t.Cleanup(b.Close)
	return b
}

// An https endpoint is reached, and checked, as the pool's tls says: the
// CAs it trusts, the name it verifies, the certificate it shows. Without
// them a certificate from a private CA is refused (502), as it should be.
func TestHTTPSEndpointsTLS(t *testing.T) {
	ca := newTestCA(t)
	plain := httpsBackend(t, ca, false)
	mutual := httpsBackend(t, ca, true)
	_, clientCert, clientKey := ca.issue("rotor", x509.ExtKeyUsageClientAuth)
	config := func(url, tlsSection string) string {
		return fmt.Sprintf(`admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools:
  - name: app
    retries: {attempts: 1}
    endpoints: [{name: a, url: %q}]
%s`, url, tlsSection)
	}
	for _, tc := range []struct {
		name, url, tls string
		want           int
	}{
		{"no tls: the private CA is not trusted", plain.URL, "", http.StatusBadGateway},
		{"the CA, but the address is not the certificate's name", plain.URL, "    tls: {ca: " + ca.pem + "}\n", http.StatusBadGateway},
		{"the CA and the certificate's name", plain.URL, "    tls: {ca: " + ca.pem + ", server_name: backend.internal}\n", http.StatusOK},
		{"the wrong name", plain.URL, "    tls: {ca: " + ca.pem + ", server_name: other.internal}\n", http.StatusBadGateway},
		{"a backend asking for a client certificate, none shown", mutual.URL, "    tls: {ca: " + ca.pem + ", server_name: backend.internal}\n", http.StatusBadGateway},
		{"a client certificate shown", mutual.URL, fmt.Sprintf("    tls: {ca: %s, server_name: backend.internal, cert: %s, key: %s}\n", ca.pem, clientCert, clientKey), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRotor(t, config(tc.url, tc.tls), nil)
			status, body := get(t, r.url("web"))
			if status != tc.want || status == http.StatusOK && body != "secure" {
				t.Fatalf("%d %q, want %d", status, body, tc.want)
			}
		})
	}

	// An endpoint whose certificate does not verify saw nothing of the
	// request: even a POST goes on to the next endpoint, and the failure
	// is a connection error against the one that showed it.
	stranger := httpsBackend(t, newTestCA(t), false)
	r2 := startRotor(t, fmt.Sprintf(`admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools:
  - name: app
    retries: {attempts: 2, budget: 1}
    endpoints: [{name: stranger, url: %q}, {name: known, url: %q}]
    tls: {ca: %s, server_name: backend.internal}
`, stranger.URL, plain.URL, ca.pem), nil)
	for i := range 4 {
		resp, err := client.Post(r2.url("web"), "text/plain", strings.NewReader("a body"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "secure" {
			t.Fatalf("POST %d past an endpoint with a certificate from another CA: %d %q", i, resp.StatusCode, b)
		}
	}
	for _, ep := range r2.Pools()[0].Snapshot.Endpoints() {
		if st := ep.State.Snapshot(time.Now()); (ep.Name == "stranger") != (st.Failures > 0) {
			t.Errorf("endpoint %s: %+v", ep.Name, st)
		}
	}

	// A reload that changes the tls gets a transport made with the new
	// one: the keep-alive connections of the old one are not reused.
	r := startRotor(t, config(plain.URL, "    tls: {ca: "+ca.pem+", server_name: other.internal}\n"), nil)
	if status, _ := get(t, r.url("web")); status != http.StatusBadGateway {
		t.Fatalf("the wrong name: %d", status)
	}
	r.rewrite(t, config(plain.URL, "    tls: {ca: "+ca.pem+", server_name: backend.internal}\n"))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if status, body := get(t, r.url("web")); status != http.StatusOK || body != "secure" {
		t.Fatalf("reloaded with the right name: %d %q", status, body)
	}

	// The active checks reach the endpoint the same way: with the pool's
	// tls it stays up, without it its checks fail and it goes down.
	check := "    health: {check: {path: /, interval: 50ms, rise: 1, fall: 2}}\n"
	withTLS := startRotor(t, config(mutual.URL, check+fmt.Sprintf("    tls: {ca: %s, server_name: backend.internal, cert: %s, key: %s}\n", ca.pem, clientCert, clientKey)), nil)
	without := startRotor(t, config(mutual.URL, check), nil)
	eventually(t, 3*time.Second, "the endpoint checked without the pool's tls goes down", func() bool {
		return without.Pools()[0].Snapshot.Endpoints()[0].State.Down()
	})
	if withTLS.Pools()[0].Snapshot.Endpoints()[0].State.Down() {
		t.Fatal("the endpoint checked with the pool's tls is down")
	}
	if status, body := get(t, withTLS.url("web")); status != http.StatusOK || body != "secure" {
		t.Fatalf("after the checks: %d %q", status, body)
	}

	// A reload whose CA file no longer loads is refused, names the field,
	// and changes nothing: the endpoint is still reached.
	badCA := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(badCA, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	withTLS.rewrite(t, config(mutual.URL, check+fmt.Sprintf("    tls: {ca: %s, server_name: backend.internal, cert: %s, key: %s}\n", badCA, clientCert, clientKey)))
	if err := withTLS.Reload(); err == nil || !strings.Contains(err.Error(), "pools.app.tls.ca") || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("reload with a CA file that does not load: %v", err)
	}
	if status, body := get(t, withTLS.url("web")); status != http.StatusOK || body != "secure" {
		t.Fatalf("after the refused reload: %d %q", status, body)
	}
}

// A pool's tls that cannot apply, or is half given, is refused with the
// field and the rule.
func TestHTTPSEndpointsTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ cfg, want string }{
		{`listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "http://127.0.0.1:1"}], tls: {server_name: x.internal}}]`,
			"pools.app.tls: no endpoint is https"},
		{`listeners: [{name: db, kind: tcp, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, address: "127.0.0.1:1"}], tls: {server_name: x.internal}}]`,
			"pools.app.tls: is for http pools"},
		{`listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "https://127.0.0.1:1"}], tls: {cert: c.pem}}]`,
			"pools.app.tls: cert and key go together"},
		{`listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "https://127.0.0.1:1"}], tls: {server_name: "x.internal:443"}}]`,
			"pools.app.tls.server_name: must be a host name"},
		{`listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "https://127.0.0.1:1"}], tls: {ca: missing.pem}}]`,
			"pools.app.tls.ca: open " + filepath.Join(dir, "missing.pem")},
		{`listeners: [{name: web, kind: http, listen: "127.0.0.1:0", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "https://127.0.0.1:1"}], tls: {cert: missing.pem, key: missing.key}}]`,
			"pools.app.tls.cert: open " + filepath.Join(dir, "missing.pem")},
	} {
		path := filepath.Join(dir, "rotor.yaml")
		if err := os.WriteFile(path, []byte(tc.cfg+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := server.Check(path, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check:\n%s\ngot %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
