// Package secret keeps credentials out of what rotor shows: logs, errors,
// the status API, metrics labels and check-config's messages. A URL's
// user part can be a token on its own (http://TOKEN:@proxy:8000,
// https://TOKEN@host), so the whole userinfo is masked, never only the
// password.
package secret

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Mask stands in for a userinfo.
const Mask = "xxxxx"

// URL returns u as a string with its whole userinfo masked, and every
// scheme://user@ in the rest of it too (a mistyped URL whose credentials
// land in a path or a fragment).
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.User == nil {
		return Text(u.String())
	}
	c := *u
	c.User = url.User(Mask)
	return Text(c.String())
}

// Text masks the userinfo of every URL-like "scheme://user@host" in s:
// for messages that quote input that may not even parse as a URL.
func Text(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		start := i + len("://")
		b.WriteString(s[:start])
		rest := s[start:]
		// The authority ends at the first /, ?, #, space or quote.
		end := strings.IndexAny(rest, "/?# \t\n\"'`<>")
		if end < 0 {
			end = len(rest)
		}
		auth := rest[:end]
		if at := strings.LastIndex(auth, "@"); at >= 0 {
			b.WriteString(Mask)
			b.WriteString(auth[at:])
		} else {
			b.WriteString(auth)
		}
		s = rest[end:]
	}
}

// ParseURL is url.Parse with an error that does not quote the input: what
// did not parse may hold credentials. The error says why ("not a URL:
// invalid port ...").
func ParseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err == nil {
		return u, nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return nil, fmt.Errorf("not a URL: %s", Text(ue.Err.Error()))
	}
	return nil, fmt.Errorf("not a URL")
}
