package h1

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// isHopByHop reports whether the canonical field name belongs to one
// connection whatever the Connection field says: the fields of one
// connection, not of the message (RFC 9110, 7.6.1, and the older ones
// proxies still meet), canonical as parsed headers' keys are.
func isHopByHop(name string) bool {
	switch name {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// dropListed deletes from h the fields that connection (a message's
// Connection values) names: once each, so the work is linear in the head
// however many it names.
func dropListed(h http.Header, connection []string) {
	for _, v := range connection {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
}

// noUserAgent is sent when the client sent no User-Agent, so that the
// server does not see Go's. Shared: headers sent are not changed in place.
var noUserAgent = []string{""}

// ForwardingFields are the fields a reverse proxy sets afresh on a
// request it sends on (the client's are not passed on as they came), as
// Outgoing's drop: canonical, as parsed headers' keys are.
var ForwardingFields = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// leftOut reports whether Outgoing(in, ForwardingFields, ...) leaves the
// field name out whatever else in holds: a hop-by-hop field, or one set
// afresh.
func leftOut(name string) bool {
	return isHopByHop(name) || slices.Contains(ForwardingFields, name)
}

// OutgoingInPlace makes in itself what Outgoing(in, ForwardingFields,
// nil) would make of it, when read, the head in was read from
// (RequestHead), had none of the fields Outgoing leaves out: then every
// field of in goes on as it is, and Outgoing's copy of them all is
// spared; an empty User-Agent is added when it had none. It reports
// whether it did: otherwise (no head known, or one with such a field) in
// is left as it was. A handler that sends in on in place lends the
// server's own map, which the server takes back when the handler
// returns: it goes only to a transport that keeps nothing of the request
// once it has answered (Transport.Short).
func OutgoingInPlace(in http.Header, read *ReadHead) bool {
	if read == nil || !read.sendable {
		return false
	}
	if !read.agent {
		in["User-Agent"] = noUserAgent
	}
	return true
}

// Outgoing returns the header a proxy sends a request on with: in's
// fields less the hop-by-hop ones (the fixed list and those in's
// Connection names) and those named in drop (canonical), sharing in's
// values, with an empty User-Agent when in has none, so that Go's transport
// sends none rather than its own. It is made in into, emptied first, when
// into is not nil: a map an earlier request's transport is done with.
func Outgoing(in http.Header, drop []string, into http.Header) http.Header {
	out := into
	if out == nil {
		out = make(http.Header, len(in)+4)
	} else {
		clear(out)
	}
	var connection []string
	agent := false
	for k, vv := range in {
		switch {
		case k == "Connection":
			connection = vv
		case isHopByHop(k), slices.Contains(drop, k):
		default:
			agent = agent || k == "User-Agent"
			out[k] = vv
		}
	}
	if connection != nil {
		dropListed(out, connection)
		_, agent = out["User-Agent"]
	}
	if !agent {
		out["User-Agent"] = noUserAgent
	}
	return out
}

// RemoveHopByHopOf deletes the hop-by-hop fields of an answer the
// Transport returned (RemoveHopByHop): none is looked for when the strict
// reader read its head and met none, as with most answers.
func RemoveHopByHopOf(res *http.Response) {
	if b := shortBody(res.Body); b != nil && b.hopFree {
		return
	}
	RemoveHopByHop(res.Header)
}

// RemoveHopByHop deletes a message's hop-by-hop fields: the fixed ones,
// in one pass over the header (most have none of them), and those its
// Connection named.
func RemoveHopByHop(h http.Header) {
	var connection []string
	for k, vv := range h {
		if isHopByHop(k) {
			if k == "Connection" {
				connection = vv
			}
			delete(h, k)
		}
	}
	dropListed(h, connection)
}
