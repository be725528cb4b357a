package config_test

import (
	"strings"
	"testing"

	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/placement"
)

func TestEveryPolicyByName(t *testing.T) {
	for _, name := range config.PolicyNames {
		p, err := config.NewPolicy(name, config.PolicyParams{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Name() != name {
			t.Errorf("NewPolicy(%q).Name() = %q", name, p.Name())
		}
	}
}

func TestPolicyErrors(t *testing.T) {
	neg := -1.0
	tests := []struct {
		name   string
		params config.PolicyParams
		want   string
	}{
		{"p3c", config.PolicyParams{}, `"p3c" is not a policy (round_robin, random, least_conn, p2c,`},
		{"p2c", config.PolicyParams{Choices: 40}, "choices: must be between 1 and 16 (got 40)"},
		{"scored", config.PolicyParams{Gamma: &neg}, "gamma: must be zero or positive (got -1)"},
		{"sticky", config.PolicyParams{StickyOnFull: "drop"}, `on_full: "drop" is not break or reject`},
		{"sticky", config.PolicyParams{StickyInner: "sticky"}, "inner: a sticky policy cannot wrap another"},
		{"sticky", config.PolicyParams{StickyInner: "nope"}, `inner: "nope" is not a policy`},
		{"sticky", config.PolicyParams{StickyInner: "bounded"}, "inner: bounded counts the requests it places until they end"},
		{"sticky", config.PolicyParams{StickyTTL: -1}, "ttl: must be positive"},
		{"ring", config.PolicyParams{Hash: "crc"}, `hash: "crc" is not a hash (xxhash, md5)`},
		{"maglev", config.PolicyParams{TableSize: 100}, "maglev table size must be prime (got 100)"},
		{"bounded", config.PolicyParams{Epsilon: -1}, "epsilon must be positive"},
	}
	for _, tt := range tests {
		_, err := config.NewPolicy(tt.name, tt.params)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %+v: err %v, want %q", tt.name, tt.params, err, tt.want)
		}
	}
}

func TestEveryPlacerByName(t *testing.T) {
	nodes := []placement.Node{{Name: "a"}, {Name: "b"}}
	for _, name := range config.PlacerNames {
		p, err := config.NewPlacer(name, nodes, config.PlacerParams{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o, err := p.Owner("k"); err != nil || (o != "a" && o != "b") {
			t.Fatalf("%s: owner %q, %v", name, o, err)
		}
	}
	if _, err := config.NewPlacer("hrw", nodes, config.PlacerParams{}); err == nil || !strings.Contains(err.Error(), `"hrw" is not an algorithm`) {
		t.Errorf("unknown placer: %v", err)
	}
	if _, err := config.NewPlacer("jump", []placement.Node{{Name: "a", Weight: 2}}, config.PlacerParams{}); err == nil || strings.HasPrefix(err.Error(), "placement:") {
		t.Errorf("jump with a weight: %v, want an error without the package prefix", err)
	}
}
