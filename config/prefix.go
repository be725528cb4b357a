package config

import (
	"fmt"
	"net/netip"
)

// ParsePrefix reads a CIDR, or a single address as the prefix holding only
// it (trusted_proxies and allow_targets take both).
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an address", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParsePrefixes reads a list with ParsePrefix; an error names the item.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		p, err := ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}
