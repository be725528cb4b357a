package reverse

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StickyCookie pins a client to an endpoint with a cookie rotor sets. The
// cookie names the endpoint and an expiry, signed with HMAC-SHA256, so a
// client cannot choose its backend or keep a pin past its time.
type StickyCookie struct {
	Name   string
	Secret []byte
	TTL    time.Duration
}

// Endpoint returns the endpoint the request's cookie pins it to, if the
// cookie is there, well signed and not expired.
func (s *StickyCookie) Endpoint(r *http.Request, now time.Time) (string, bool) {
	c, err := r.Cookie(s.Name)
	if err != nil {
		return "", false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 {
		return "", false
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(mac, s.sign(parts[0]+"."+parts[1])) {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || now.Unix() > exp {
		return "", false
	}
	name, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return "", false
	}
	return string(name), true
}

// Cookie returns the cookie pinning a client to endpoint name from now.
func (s *StickyCookie) Cookie(name string, now time.Time, secure bool) *http.Cookie {
	payload := base64.RawURLEncoding.EncodeToString([]byte(name)) + "." + strconv.FormatInt(now.Add(s.TTL).Unix(), 10)
	return &http.Cookie{
		Name:     s.Name,
		Value:    payload + "." + base64.RawURLEncoding.EncodeToString(s.sign(payload)),
		Path:     "/",
		MaxAge:   int(s.TTL.Seconds()),
		HttpOnly: true,
		Secure:   secure,
		SameSite: http.SameSiteLaxMode,
	}
}

func (s *StickyCookie) sign(payload string) []byte {
	m := hmac.New(sha256.New, s.Secret)
	m.Write([]byte(payload))
	return m.Sum(nil)
}
