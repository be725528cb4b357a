package server

import (
	"testing"
	"time"
)

// SetAdminBounds sets the admin listener's bounds on a request's head
// (its time and size) and on idle connections, for the servers started
// after it, until the test ends.
func SetAdminBounds(tb testing.TB, head, idle time.Duration, headBytes int) {
	was := adminBounds
	tb.Cleanup(func() { adminBounds = was })
	adminBounds.head, adminBounds.idle, adminBounds.headBytes = head, idle, headBytes
}
