package placement

import (
	"slices"
	"strings"
)

// Placers whose answer depends on a node's position (Jump and ModN number
// their nodes, Maglev's fill lets earlier nodes claim contested slots first)
// put their nodes in one canonical order first, so that two processes given
// the same set in a different order place every key alike.

// canonical sorts nodes, in place, into name order with runs of digits
// compared as numbers: n2 before n10, cache-9 before cache-10. A set of
// numbered nodes grown by the next number keeps every other node's
// position, which is what lets Jump move only 1/(N+1) of the keys.
func canonical(nodes []Node) []Node {
	slices.SortFunc(nodes, func(a, b Node) int { return compareNames(a.Name, b.Name) })
	return nodes
}

// compareNames is the natural order of canonical: names split into runs of
// digits and of other bytes; digit runs compare by value (leading zeros
// ignored), other runs bytewise. Names equal in that order (n01 and n1)
// fall back to plain byte order, so the order is total.
func compareNames(a, b string) int {
	x, y := a, b
	for x != "" && y != "" {
		dx, dy := isDigit(x[0]), isDigit(y[0])
		if dx != dy {
			return strings.Compare(x, y)
		}
		rx, ry := run(x, dx), run(y, dx)
		var c int
		if dx {
			c = compareNumbers(rx, ry)
		} else {
			c = strings.Compare(rx, ry)
		}
		if c != 0 {
			return c
		}
		x, y = x[len(rx):], y[len(ry):]
	}
	switch {
	case x == "" && y != "":
		return -1
	case x != "" && y == "":
		return 1
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// run returns the longest prefix of s whose bytes are all digits (digits
// true) or all not.
func run(s string, digits bool) string {
	i := 0
	for i < len(s) && isDigit(s[i]) == digits {
		i++
	}
	return s[:i]
}

// compareNumbers compares two runs of decimal digits by value, however
// long they are.
func compareNumbers(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}
