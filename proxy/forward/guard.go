package forward

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// Blocked are the target ranges refused by default: loopback, private,
// carrier-grade NAT, link-local (with the cloud metadata address
// 169.254.169.254), unique-local (with fd00:ec2::254), site-local,
// unspecified, multicast, benchmarking, documentation and discard ranges,
// the IPv4-compatible IPv6 block ::/96 (which holds ::1 and ::), local-use
// NAT64 and Teredo (whose IPv4 address is obfuscated). A forward proxy
// that reaches them lets its clients into the network it sits in (SSRF).
// Addresses that carry an IPv4 address (mapped, NAT64 64:ff9b::/96, 6to4
// 2002::/16) are judged by the IPv4 address as well: see Permits.
var Blocked = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
	"224.0.0.0/4", "240.0.0.0/4",
	"::/96", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8", "64:ff9b:1::/48", "100::/64",
	"2001::/32", "2001:db8::/32",
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// Guard decides which target addresses may be reached. A nil *Guard is
// the default guard: the Blocked ranges are refused, nothing is allowed
// past them.
type Guard struct {
	// Allow lists ranges allowed even though Blocked covers them.
	Allow []netip.Prefix
}

// ErrForbiddenTarget is wrapped by errors for targets the guard refuses.
var ErrForbiddenTarget = fmt.Errorf("target address is not allowed")

// Permits reports whether addr may be reached. Its zone (fe80::1%eth0,
// ::1%lo) is dropped first: it names an interface, not another address.
// An IPv6 address that carries an IPv4 address is judged as both, and
// permitted only if both are: mapped (::ffff:a.b.c.d, judged as the IPv4
// address alone), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:AABB:CCDD::).
func (g *Guard) Permits(addr netip.Addr) bool {
	addr = addr.WithZone("").Unmap()
	if v4, ok := embeddedIPv4(addr); ok && !g.permits(v4) {
		return false
	}
	return g.permits(addr)
}

func (g *Guard) permits(addr netip.Addr) bool {
	if g != nil {
		for _, p := range g.Allow {
			if p.Contains(addr) {
				return true
			}
		}
	}
	for _, p := range Blocked {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// embeddedIPv4 returns the IPv4 address an IPv6 address carries in NAT64
// (RFC 6052, the last 32 bits) or 6to4 (RFC 3056, bits 16 to 47) form.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// Control is a net.Dialer Control function that refuses forbidden
// addresses: it runs after name resolution, on the address actually
// dialled, so a name that resolves (or rebinds) to a private address is
// caught too.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	if !g.Permits(addr) {
		return fmt.Errorf("%w: %s", ErrForbiddenTarget, addr)
	}
	return nil
}

// CheckHost resolves host and refuses it if any address it has is
// forbidden. Routes through another proxy resolve the target there, so
// this is checked here first, on the same forms the C resolver accepts:
// decimal (2130706433), hex (0x7f000001), octal (0177.0.0.1) and short
// (127.1) IPv4, and IPv4-mapped IPv6.
func (g *Guard) CheckHost(ctx context.Context, host string) error {
	if literal, err := g.checkLiteral(host); literal {
		return err
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", normalHost(host))
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := g.check(a); err != nil {
			return err
		}
	}
	return nil
}

// Resolve returns the address to dial for host, checked: host itself if
// it is an address in any of CheckHost's forms, else the first address the
// name resolves to, once every address it resolves to is permitted (a name
// that mixes a public address with a private one is refused whole). The
// address returned is the one to dial, so that no second resolution can
// bring back another one.
func (g *Guard) Resolve(ctx context.Context, host string) (netip.Addr, error) {
	host = normalHost(host)
	if addr, ok := parseLooseIPv4(host); ok {
		return addr, g.check(addr)
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr.WithZone("").Unmap(), g.check(addr)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s: no address", host)
	}
	for _, a := range addrs {
		if err := g.check(a); err != nil {
			return netip.Addr{}, err
		}
	}
	return addrs[0].WithZone("").Unmap(), nil
}

// CheckLiteral refuses host if it is an address, in any of CheckHost's
// forms, that the guard forbids; a name passes (it is checked where it is
// dialled).
func (g *Guard) CheckLiteral(host string) error {
	_, err := g.checkLiteral(host)
	return err
}

func normalHost(host string) string { return strings.TrimSuffix(strings.Trim(host, "[]"), ".") }

// checkLiteral checks host if it is an address; literal says it was.
func (g *Guard) checkLiteral(host string) (literal bool, err error) {
	host = normalHost(host)
	if addr, ok := parseLooseIPv4(host); ok {
		return true, g.check(addr)
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return true, g.check(addr)
	}
	return false, nil
}

func (g *Guard) check(a netip.Addr) error {
	if !g.Permits(a) {
		return fmt.Errorf("%w: %s", ErrForbiddenTarget, a.WithZone("").Unmap())
	}
	return nil
}

// parseLooseIPv4 parses inet_aton's forms: 1 to 4 parts, each decimal,
// 0x hex or 0-led octal, the last part filling the remaining bytes.
func parseLooseIPv4(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		switch {
		case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
			base, p = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil || p == "" && base != 8 {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var ip uint64
	last := len(vals) - 1
	for i := 0; i < last; i++ {
		if vals[i] > 255 {
			return netip.Addr{}, false
		}
		ip |= vals[i] << (24 - 8*i)
	}
	if vals[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	ip |= vals[last]
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}
