// Package config turns names and settings, as users write them, into the
// library's values: the registry of policies by name lives here, at the
// edge, not in the core.
package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/placement"
)

// PolicyNames lists every policy by its config name.
var PolicyNames = []string{
	"round_robin", "random", "least_conn", "p2c", "weighted_round_robin", "weighted_least_conn",
	"peak_ewma", "scored", "sticky", "ring", "rendezvous", "maglev", "bounded",
}

// PolicyParams are a policy's settings. Zero values mean the defaults; each
// policy reads only its own.
type PolicyParams struct {
	Choices int      // p2c, peak_ewma: how many random choices (2)
	Gamma   *float64 // scored: the exponent on weights (balance.DefaultGamma, 2)

	StickyHash    bool          // sticky: rendezvous hashing instead of a table
	StickyTTL     time.Duration // sticky: table entry lifetime (30m)
	StickyEntries int           // sticky: the table's bound (100000)
	StickyOnFull  string        // sticky: "break" (default) or "reject"
	StickyInner   string        // sticky: policy for new keys (least_conn)

	VNodes    int     // ring, bounded: points per unit of weight (100)
	Hash      string  // ring, bounded: xxhash (default) or md5
	Epsilon   float64 // bounded: load slack (0.25)
	TableSize int     // maglev: table size, prime (65537)
}

// PolicyKey says what a policy is built from, as a comparable value:
// while a pool's key stays the same across reloads, the policy value it
// built (round robin's counter, smooth weights, sticky tables, bounded
// loads) is kept.
type PolicyKey struct {
	Name   string
	Params PolicyParams // Gamma nil: its value is below
	Gamma  float64
	HasGam bool
}

// Key returns the key of the named policy with these settings.
func (p PolicyParams) Key(name string) PolicyKey {
	k := PolicyKey{Name: name, Params: p}
	if p.Gamma != nil {
		k.Gamma, k.HasGam = *p.Gamma, true
	}
	k.Params.Gamma = nil
	return k
}

// NewPolicy builds the named policy. Errors name the setting and the rule.
func NewPolicy(name string, p PolicyParams) (balance.Policy, error) {
	switch name {
	case "round_robin":
		return &balance.RoundRobin{}, nil
	case "random":
		return balance.Random{}, nil
	case "least_conn":
		return balance.LeastConn{}, nil
	case "p2c":
		return balance.NewP2C(p.Choices)
	case "weighted_round_robin":
		return &balance.SmoothWeighted{}, nil
	case "weighted_least_conn":
		return balance.WeightedLeastConn{}, nil
	case "peak_ewma":
		return balance.NewPeakEWMA(p.Choices)
	case "scored":
		gamma := balance.DefaultGamma
		if p.Gamma != nil {
			gamma = *p.Gamma
		}
		return balance.NewScored(gamma)
	case "sticky":
		inner := p.StickyInner
		if inner == "" {
			inner = "least_conn"
		}
		if inner == "sticky" {
			return nil, fmt.Errorf("inner: a sticky policy cannot wrap another")
		}
		in, err := NewPolicy(inner, PolicyParams{Choices: p.Choices, Gamma: p.Gamma})
		if err != nil {
			return nil, fmt.Errorf("inner: %w", err)
		}
		var onFull balance.OnFull
		switch p.StickyOnFull {
		case "", "break":
			onFull = balance.BreakAffinity
		case "reject":
			onFull = balance.Reject
		default:
			return nil, fmt.Errorf("on_full: %q is not break or reject", p.StickyOnFull)
		}
		st, err := balance.NewSticky(balance.StickyOptions{Hash: p.StickyHash, TTL: p.StickyTTL, MaxEntries: p.StickyEntries, OnFull: onFull, Inner: in})
		if err != nil {
			return nil, err
		}
		return st, nil
	case "ring", "rendezvous", "maglev", "bounded":
		h, err := placement.ParseHash(p.Hash)
		if err != nil {
			return nil, fmt.Errorf("hash: %w", err)
		}
		if p.VNodes < 0 {
			return nil, fmt.Errorf("vnodes: must be at least 1 (got %d)", p.VNodes)
		}
		return balance.NewKeyed(name, balance.KeyedOptions{
			Ring: placement.RingOptions{VNodes: p.VNodes, Hash: h}, Epsilon: p.Epsilon, TableSize: p.TableSize,
		})
	}
	return nil, fmt.Errorf("%q is not a policy (%s)", name, strings.Join(PolicyNames, ", "))
}
