package reverse

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/rotor-lb/rotor/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRouteMatching(t *testing.T) {
	pool := func(name string) *Pool { return &Pool{Pool: &proxy.Pool{Name: name}} }
	api, web, admin, beta, def := pool("api"), pool("web"), pool("admin"), pool("beta"), pool("default")
	tbl := &Table{Routes: []Route{
		{Host: "api.example.com", PathPrefix: "/", Pool: api},
		{Host: "*.example.com", PathPrefix: "/admin", Header: map[string]string{"X-Admin": "*"}, Pool: admin},
		{PathPrefix: "/", Cookie: map[string]string{"beta": "1"}, Pool: beta},
		{Host: "*.example.com", PathPrefix: "/", Pool: web},
	}, Default: def}
	tests := []struct {
		name, host, path string
		header, cookie   [2]string
		want             *Pool
	}{
		{"exact host", "api.example.com", "/v1", [2]string{}, [2]string{}, api},
		{"host with port, any case", "API.example.com:8443", "/", [2]string{}, [2]string{}, api},
		{"wildcard host and prefix", "www.example.com", "/shop", [2]string{}, [2]string{}, web},
		{"header present", "www.example.com", "/admin/users", [2]string{"X-Admin", "yes"}, [2]string{}, admin},
		{"header absent falls through", "www.example.com", "/admin/users", [2]string{}, [2]string{}, web},
		{"cookie value", "other.test", "/", [2]string{}, [2]string{"beta", "1"}, beta},
		{"wrong cookie value", "other.test", "/", [2]string{}, [2]string{"beta", "0"}, def},
		{"nothing matches", "other.test", "/", [2]string{}, [2]string{}, def},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "http://"+tt.host+tt.path, nil)
		r.Host = tt.host
		if tt.header[0] != "" {
			r.Header.Set(tt.header[0], tt.header[1])
		}
		if tt.cookie[0] != "" {
			r.AddCookie(&http.Cookie{Name: tt.cookie[0], Value: tt.cookie[1]})
		}
		if got := tbl.match(r); got != tt.want {
			t.Errorf("%s: pool %s, want %s", tt.name, got.Name, tt.want.Name)
		}
	}
}

func TestJoinPath(t *testing.T) {
	for _, tc := range []struct{ target, in, want, wantRaw string }{
		{"http://b", "/a/b", "/a/b", ""},
		{"http://b/", "/a", "/a", ""},
		{"http://b/prefix", "/a", "/prefix/a", ""},
		{"http://b/prefix/", "/a", "/prefix/a", ""},
		{"http://b/pre", "/a%2Fb", "/pre/a/b", "/pre/a%2Fb"},
	} {
		tu, _ := url.Parse(tc.target)
		iu, _ := url.Parse("http://x" + tc.in)
		p, raw := joinPath(tu, iu)
		if p != tc.want || raw != tc.wantRaw {
			t.Errorf("%s + %s = %q %q, want %q %q", tc.target, tc.in, p, raw, tc.want, tc.wantRaw)
		}
	}
}

func TestTrusted(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for remote, want := range map[string]bool{
		"10.1.2.3:555": true, "[::1]:80": true, "[::ffff:10.0.0.1]:80": true, "192.168.0.1:80": false, "garbage": false,
	} {
		if got := trusted(nets, remote); got != want {
			t.Errorf("trusted(%s) = %v", remote, got)
		}
	}
	if trusted(nil, "10.1.2.3:1") {
		t.Error("trusted with no list")
	}
}

// rewrite sets the forwarding headers as httputil's SetXForwarded does,
// with rotor's rules for trusted peers and X-Real-IP on top: against
// those rules written with SetXForwarded, for every mix of trust, prior
// headers, TLS and client addresses.
func TestRewriteAsSetXForwarded(t *testing.T) {
	want := func(pr *httputil.ProxyRequest, trust bool) {
		if v := pr.In.Header.Values("X-Forwarded-For"); trust && len(v) > 0 {
			pr.Out.Header["X-Forwarded-For"] = append([]string(nil), v...)
		}
		pr.SetXForwarded()
		if trust {
			for _, k := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v := pr.In.Header.Get(k); v != "" {
					pr.Out.Header.Set(k, v)
				}
			}
		}
		if v := pr.In.Header.Get("X-Real-IP"); !trust || v == "" {
			host, _, err := net.SplitHostPort(pr.In.RemoteAddr)
			if err != nil {
				host = pr.In.RemoteAddr
			}
			pr.Out.Header.Set("X-Real-IP", host)
		}
		pr.Out.Host = pr.In.Host
	}
	h := &Handler{}
	for _, trust := range []bool{false, true} {
		for _, remote := range []string{"127.0.0.1:5000", "[::1]:5000", "@unix"} {
			for _, prior := range []http.Header{
				{},
				{"X-Forwarded-For": {"203.0.113.7"}, "X-Forwarded-Host": {"a.example"}, "X-Forwarded-Proto": {"https"}, "X-Real-Ip": {"203.0.113.7"}},
				{"X-Forwarded-For": {"1.1.1.1", "2.2.2.2"}, "X-Real-Ip": {""}},
			} {
				for _, tls := range []bool{false, true} {
					in := httptest.NewRequest("GET", "http://in.example/a", nil)
					in.RemoteAddr, in.Header = remote, prior.Clone()
					if !tls {
						in.TLS = nil
					} else if in.TLS == nil {
						in.TLS = &tlsState
					}
					out := in.Clone(in.Context())
					for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
						out.Header.Del(k) // as ReverseProxy does before Rewrite
					}
					w := &httputil.ProxyRequest{In: in, Out: out}
					want(w, trust)
					got := outHeader(in.Header, "", nil)
					delete(got, "User-Agent") // outHeader's, not rewrite's
					h.rewrite(in, got, trust, new([4]string))
					if diff := cmp.Diff(w.Out.Header, got); diff != "" || w.Out.Host != in.Host {
						t.Errorf("trusted %v, %s, %v, TLS %v: (-want +got)\n%s", trust, remote, prior, tls, diff)
					}
				}
			}
		}
	}
}

var tlsState tls.ConnectionState

// outHeader drops every field the client's Connection names, in any case
// and spacing, over several Connection fields, and the fixed hop-by-hop
// and forwarding fields; it keeps the rest, "Te: trailers" and the upgrade.
// A Connection naming thousands of fields costs one deletion each.
func TestOutHeader(t *testing.T) {
	in := http.Header{
		"Connection":        {"keep-alive, X-A", " x-b ,Upgrade", ""},
		"Upgrade":           {"websocket"},
		"X-A":               {"1"},
		"X-B":               {"2"},
		"X-C":               {"3"},
		"Keep-Alive":        {"timeout=5"},
		"Proxy-Connection":  {"keep-alive"},
		"Te":                {"gzip, TRAILERS"},
		"Transfer-Encoding": {"chunked"},
		"Forwarded":         {"for=1.2.3.4"},
		"X-Forwarded-For":   {"6.6.6.6"},
	}
	got := outHeader(in, "websocket", nil)
	want := http.Header{
		"X-C": {"3"}, "Te": {"trailers"}, "Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "User-Agent": {""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}

	many := http.Header{}
	var names []string
	for i := range 5000 {
		name := fmt.Sprintf("X-F%d", i)
		many[name] = []string{"v"}
		if i%2 == 0 {
			names = append(names, strings.ToLower(name))
		}
	}
	many["Connection"] = []string{strings.Join(names, ",")}
	many["User-Agent"] = []string{"ua"}
	got = outHeader(many, "", nil)
	if len(got) != 2500+1 {
		t.Fatalf("%d fields kept, want the 2,500 not named and User-Agent", len(got))
	}
	for k := range got {
		var i int
		if _, err := fmt.Sscanf(k, "X-F%d", &i); err == nil && i%2 == 0 {
			t.Fatalf("%s was named by Connection and kept", k)
		}
	}
}

// BenchmarkOutHeaderManyListed: a head of 2,000 fields whose Connection
// names every one, as a client may send.
func BenchmarkOutHeaderManyListed(b *testing.B) {
	h := http.Header{}
	var names []string
	for i := range 2000 {
		name := fmt.Sprintf("X-F%d", i)
		h[name] = []string{"v"}
		names = append(names, name)
	}
	h["Connection"] = []string{strings.Join(names, ", ")}
	b.ReportAllocs()
	for b.Loop() {
		outHeader(h, "", nil)
	}
}

// splitHostPort is net.SplitHostPort, its quick way included.
func TestSplitHostPort(t *testing.T) {
	for _, addr := range []string{
		"127.0.0.1:8080", "127.0.0.1:", "example.com:80", ":80", "host", "", "[::1]:80", "[::1]", "::1",
		"a:b:c", "[a]:b:c", "a]:80", "[a:80", "a:[80]", "a:8]0", "1.2.3.4:0x50",
	} {
		host, port, err := splitHostPort(addr)
		wantHost, wantPort, wantErr := net.SplitHostPort(addr)
		if host != wantHost || port != wantPort || (err == nil) != (wantErr == nil) {
			t.Errorf("splitHostPort(%q) = %q, %q, %v; net.SplitHostPort: %q, %q, %v", addr, host, port, err, wantHost, wantPort, wantErr)
		}
	}
}

// outHeader made in the map of an earlier request's header leaves
// nothing of that request in it.
func TestOutHeaderInto(t *testing.T) {
	first := http.Header{"Accept": {"a"}, "Cookie": {"c=1"}, "Te": {"trailers"}}
	second := http.Header{"Accept": {"b"}, "Connection": {"X-Gone"}, "X-Gone": {"1"}}
	m := outHeader(first, "websocket", nil)
	got := outHeader(second, "", m)
	if diff := cmp.Diff(outHeader(second, "", nil), got); diff != "" {
		t.Errorf("(-made anew +made in the first's map)\n%s", diff)
	}
}
