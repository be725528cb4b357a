package reverse

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestStickyCookieSignature(t *testing.T) {
	s := &StickyCookie{Name: "pin", Secret: []byte("0123456789abcdef"), TTL: time.Hour}
	now := time.Unix(1_800_000_000, 0)
	c := s.Cookie("backend-2", now, true)
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode {
		t.Fatalf("cookie flags %+v", c)
	}
	req := func(v string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.AddCookie(&http.Cookie{Name: "pin", Value: v})
		return r
	}
	if name, ok := s.Endpoint(req(c.Value), now); !ok || name != "backend-2" {
		t.Fatalf("own cookie: %q %v", name, ok)
	}
	if _, ok := s.Endpoint(req(c.Value), now.Add(2*time.Hour)); ok {
		t.Fatal("an expired cookie was accepted")
	}
	other := &StickyCookie{Name: "pin", Secret: []byte("another-secret-0000"), TTL: time.Hour}
	if _, ok := other.Endpoint(req(c.Value), now); ok {
		t.Fatal("a cookie signed with another secret was accepted")
	}
	for _, bad := range []string{"", "a.b", "YmFk.1.sig", c.Value + "x", "!!!.1.AAAA"} {
		if _, ok := s.Endpoint(req(bad), now); ok {
			t.Fatalf("cookie %q accepted", bad)
		}
	}
}
