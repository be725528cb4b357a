package testtool

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// DNS is a small DNS server on loopback UDP, for tests: it answers A,
// AAAA and SRV questions from records the test sets and changes, and
// SERVFAIL for everything while failing.
type DNS struct {
	Addr string

	mu  sync.Mutex
	ips map[string][]net.IP   // guarded by mu; by FQDN
	srv map[string][]*dns.SRV // guarded by mu
	ttl uint32

	failing atomic.Bool
	delay   atomic.Int64 // ns each answer waits
	queries atomic.Int64
}

// NewDNS starts a DNS server until the test ends.
func NewDNS(t testing.TB) *DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{Addr: pc.LocalAddr().String(), ips: map[string][]net.IP{}, srv: map[string][]*dns.SRV{}, ttl: 1}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.answer)}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return d
}

// SetIPs makes name answer with these addresses (A for IPv4, AAAA for
// IPv6); none makes it answer nothing.
func (d *DNS) SetIPs(name string, ips ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var list []net.IP
	for _, s := range ips {
		list = append(list, net.ParseIP(s))
	}
	d.ips[dns.Fqdn(name)] = list
}

// SetSRV makes name answer with SRV records "target:port" (priority and
// weight 10).
func (d *DNS) SetSRV(name string, targets ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var list []*dns.SRV
	for _, tp := range targets {
		host, port, _ := net.SplitHostPort(tp)
		p, _ := strconv.ParseUint(port, 10, 16)
		list = append(list, &dns.SRV{Hdr: dns.RR_Header{Name: dns.Fqdn(name), Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: d.ttl},
			Priority: 10, Weight: 10, Port: uint16(p), Target: dns.Fqdn(host)})
	}
	d.srv[dns.Fqdn(name)] = list
}

// Delay makes every answer wait d first.
func (d *DNS) Delay(wait time.Duration) { d.delay.Store(int64(wait)) }

// Fail makes every answer SERVFAIL while on.
func (d *DNS) Fail(on bool) { d.failing.Store(on) }

// Queries counts the questions asked.
func (d *DNS) Queries() int64 { return d.queries.Load() }

func (d *DNS) answer(w dns.ResponseWriter, req *dns.Msg) {
	d.queries.Add(1)
	time.Sleep(time.Duration(d.delay.Load()))
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if d.failing.Load() {
		m.SetRcode(req, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
		return
	}
	d.mu.Lock()
	known := false
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		ips, okIP := d.ips[name]
		srvs, okSRV := d.srv[name]
		known = known || okIP || okSRV
		switch q.Qtype {
		case dns.TypeA, dns.TypeAAAA:
			for _, ip := range ips {
				hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: d.ttl}
				if v4 := ip.To4(); v4 != nil && q.Qtype == dns.TypeA {
					hdr.Rrtype = dns.TypeA
					m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: v4})
				} else if v4 == nil && q.Qtype == dns.TypeAAAA {
					hdr.Rrtype = dns.TypeAAAA
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip})
				}
			}
		case dns.TypeSRV:
			for _, s := range srvs {
				m.Answer = append(m.Answer, s)
			}
		}
	}
	d.mu.Unlock()
	if !known {
		m.SetRcode(req, dns.RcodeNameError)
	}
	_ = w.WriteMsg(m)
}
