package health

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Defaults from article 001: decays of 0.3, three consecutive failures open
// the breaker, which stays open fifteen seconds.
const (
	DefaultDecay     = 0.3
	DefaultThreshold = 3
	DefaultCooldown  = 15 * time.Second
	// DefaultPeakDecay is the time constant of the peak-EWMA latency
	// estimate (Finagle's default).
	DefaultPeakDecay = 10 * time.Second
)

// Config tunes the health model of one pool. The zero value means the
// defaults; Normalize fills them in and Validate checks the result.
type Config struct {
	// SuccessDecay is the weight of each new outcome in the success EWMA,
	// in (0, 1]. Higher reacts faster and forgets sooner.
	SuccessDecay float64
	// LatencyDecay is the same for the latency EWMA, updated on successes
	// only: a failure's duration says how it failed, not how fast the
	// endpoint is when it works.
	LatencyDecay float64
	// Threshold is how many consecutive failures open the breaker (>= 1).
	Threshold int
	// Cooldown is how long an open breaker stays open before one half-open
	// probe may go through (> 0).
	Cooldown time.Duration
	// CostWeight scales an endpoint's cost in its score:
	// score x 1/(1 + CostWeight x cost). Zero leaves cost out.
	CostWeight float64
	// PeakDecay is the time constant of the peak-EWMA latency estimate the
	// peak_ewma policy reads (> 0).
	PeakDecay time.Duration
}

// Normalize returns c with zero fields set to their defaults.
func (c Config) Normalize() Config {
	if c.SuccessDecay == 0 {
		c.SuccessDecay = DefaultDecay
	}
	if c.LatencyDecay == 0 {
		c.LatencyDecay = DefaultDecay
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.Cooldown == 0 {
		c.Cooldown = DefaultCooldown
	}
	if c.PeakDecay == 0 {
		c.PeakDecay = DefaultPeakDecay
	}
	return c
}

// Validate checks a normalised config. Errors name the field as the YAML
// configuration spells it.
func (c Config) Validate() error {
	if !(c.SuccessDecay > 0 && c.SuccessDecay <= 1) {
		return fmt.Errorf("success_decay: must be in (0, 1] (got %v)", c.SuccessDecay)
	}
	if !(c.LatencyDecay > 0 && c.LatencyDecay <= 1) {
		return fmt.Errorf("latency_decay: must be in (0, 1] (got %v)", c.LatencyDecay)
	}
	if c.Threshold < 1 {
		return fmt.Errorf("threshold: must be at least 1 (got %d)", c.Threshold)
	}
	if c.Cooldown <= 0 {
		return fmt.Errorf("cooldown: must be positive (got %v)", c.Cooldown)
	}
	if c.CostWeight < 0 || math.IsNaN(c.CostWeight) || math.IsInf(c.CostWeight, 0) {
		return fmt.Errorf("cost_weight: must be zero or positive (got %v)", c.CostWeight)
	}
	if c.PeakDecay <= 0 {
		return fmt.Errorf("peak_decay: must be positive (got %v)", c.PeakDecay)
	}
	return nil
}

// Environment variables that override the config, as article 001's
// configuration contract has them: tunables have defaults and can be set
// from the environment.
const (
	EnvSuccessDecay = "ROTOR_SUCCESS_DECAY"
	EnvLatencyDecay = "ROTOR_LATENCY_DECAY"
	EnvThreshold    = "ROTOR_BREAKER_THRESHOLD"
	EnvCooldown     = "ROTOR_BREAKER_COOLDOWN"
)

// FromEnv returns c with any field whose variable getenv returns non-empty
// set from it. A value that does not parse is an error naming the variable.
// Call Normalize and Validate after.
func (c Config) FromEnv(getenv func(string) string) (Config, error) {
	floatVar := func(name string, dst *float64) error {
		if v := getenv(name); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("%s: %q is not a number", name, v)
			}
			*dst = f
		}
		return nil
	}
	if err := floatVar(EnvSuccessDecay, &c.SuccessDecay); err != nil {
		return c, err
	}
	if err := floatVar(EnvLatencyDecay, &c.LatencyDecay); err != nil {
		return c, err
	}
	if v := getenv(EnvThreshold); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("%s: %q is not a whole number", EnvThreshold, v)
		}
		c.Threshold = n
	}
	if v := getenv(EnvCooldown); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("%s: %q is not a duration (e.g. 15s)", EnvCooldown, v)
		}
		c.Cooldown = d
	}
	return c, nil
}
