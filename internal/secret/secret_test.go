package secret_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/rotor-lb/rotor/internal/secret"
)

func TestURLMasksTheWholeUserinfo(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://TOKEN123:@proxy:8000", "http://xxxxx@proxy:8000"},
		{"https://TOKEN123@host/p", "https://xxxxx@host/p"},
		{"socks5://user:pass@h:1080", "socks5://xxxxx@h:1080"},
		{"http://host:80/path", "http://host:80/path"},
		{"#://0000@", "#://xxxxx@"},
		{"h://x/?next=http://u:TOKEN123@y", "h://x/?next=http://xxxxx@y"},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := secret.URL(u); got != tc.want {
			t.Errorf("URL(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestTextMasksEveryURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`proxyconnect tcp: dial http://TOKEN123:@p:8000: refused`, `proxyconnect tcp: dial http://xxxxx@p:8000: refused`},
		{`parse "socks5://u:p@h:1:bad": invalid port`, `parse "socks5://xxxxx@h:1:bad": invalid port`},
		{`two: http://a@x and https://b:c@y/z`, `two: http://xxxxx@x and https://xxxxx@y/z`},
		{`no url here`, `no url here`},
		{`ends with scheme://`, `ends with scheme://`},
	} {
		got := secret.Text(tc.in)
		if got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, s := range []string{"TOKEN123", ":p@", "u:p", "b:c"} {
			if strings.Contains(got, s) {
				t.Errorf("Text(%q) still shows %q", tc.in, s)
			}
		}
	}
}
