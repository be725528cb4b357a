package proxy

import "time"

// Observer is told what the proxies do, for metrics. Implementations must
// be safe for concurrent use and quick.
type Observer interface {
	// Served: one request or connection finished; endpoint is "" when none
	// was picked.
	Served(listener, pool, endpoint string, status int, d time.Duration)
	// Retried: an attempt failed and another endpoint was tried.
	Retried(pool string)
}

// NopObserver observes nothing.
type NopObserver struct{}

// Served does nothing.
func (NopObserver) Served(string, string, string, int, time.Duration) {}

// Retried does nothing.
func (NopObserver) Retried(string) {}
