package server

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/internal/testtool"
)

// Each record type turns into endpoints named host:port with the spec's
// fields; an empty or failed answer is an error, so the last good set stays.
func TestLookup(t *testing.T) {
	d := testtool.NewDNS(t)
	d.SetIPs("web.test", "127.0.0.3", "127.0.0.2", "::1")
	d.SetSRV("_db._tcp.test", "db1.test:5433", "db2.test:5432")
	d.SetIPs("db1.test", "127.0.0.5")
	d.SetIPs("db2.test", "127.0.0.4")
	d.SetIPs("empty.test")
	names := func(eps []config.Endpoint) []string {
		var out []string
		for _, e := range eps {
			out = append(out, e.Name+" "+e.URL+e.Address)
		}
		return out
	}
	for _, tc := range []struct {
		spec config.EndpointsFrom
		tcp  bool
		want []string
		err  string
	}{
		{spec: config.EndpointsFrom{DNS: "web.test.", Type: "A", Port: 8080, Scheme: "https", Weight: 2},
			want: []string{"127.0.0.2:8080 https://127.0.0.2:8080", "127.0.0.3:8080 https://127.0.0.3:8080"}},
		{spec: config.EndpointsFrom{DNS: "web.test.", Type: "AAAA", Port: 8080, Scheme: "http"},
			want: []string{"[::1]:8080 http://[::1]:8080"}},
		{spec: config.EndpointsFrom{DNS: "_db._tcp.test.", Type: "SRV"}, tcp: true,
			want: []string{"127.0.0.4:5432 127.0.0.4:5432", "127.0.0.5:5433 127.0.0.5:5433"}},
		{spec: config.EndpointsFrom{DNS: "empty.test.", Type: "A", Port: 80, Scheme: "http"}, err: "no such host"},
		{spec: config.EndpointsFrom{DNS: "nowhere.test.", Type: "A", Port: 80, Scheme: "http"}, err: "no such host"},
	} {
		tc.spec.Resolver = d.Addr
		eps, err := lookup(context.Background(), &tc.spec, tc.tcp)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), d.Addr) {
				t.Errorf("%s %s: %v, want an error with %q", tc.spec.Type, tc.spec.DNS, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %s: %v", tc.spec.Type, tc.spec.DNS, err)
		}
		if diff := cmp.Diff(tc.want, names(eps)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.spec.Type, tc.spec.DNS, diff)
		}
		if tc.spec.Weight == 2 && eps[0].Weight != 2 {
			t.Errorf("the template's weight was not applied: %+v", eps[0])
		}
	}
}
