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
// 169.254.169.254), unique-local (with fd00:ec2::254), unspecified and
// multicast. A forward proxy that reaches them lets its clients into the
// network it sits in (SSRF).
var Blocked = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "64:ff9b::/96",
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

// Permits reports whether addr may be reached. IPv4-mapped IPv6 addresses
// are judged as the IPv4 address they carry.
func (g *Guard) Permits(addr netip.Addr) bool {
	addr = addr.Unmap()
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
		return fmt.Errorf("%w: %s", ErrForbiddenTarget, a.Unmap())
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
