package h1

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// hopByHop are the fields of one connection, not of the message (RFC
// 9110, 7.6.1, and the older ones proxies still meet), canonical as parsed
// headers' keys are.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// IsHopByHop reports whether the canonical field name belongs to one
// connection whatever the Connection field says.
func IsHopByHop(name string) bool { return slices.Contains(hopByHop, name) }

// DropListed deletes from h the fields that connection (a message's
// Connection values) names: once each, so the work is linear in the head
// however many it names.
func DropListed(h http.Header, connection []string) {
	for _, v := range connection {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
}

// RemoveHopByHop deletes a message's hop-by-hop fields: those its
// Connection names, then the fixed ones.
func RemoveHopByHop(h http.Header) {
	DropListed(h, h["Connection"])
	for _, k := range hopByHop {
		delete(h, k)
	}
}
