package bench

import (
	"net/http"
	"testing"
	"time"
)

func TestRouteSpecWindows(t *testing.T) {
	s := RouteSpec{BlockFrom: 3 * time.Second, BlockFor: 2 * time.Second, BurstEvery: 10 * time.Second, BurstFor: time.Second}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{
		{0, 0}, {2999 * time.Millisecond, 0}, {3 * time.Second, http.StatusForbidden}, {4999 * time.Millisecond, http.StatusForbidden},
		{5 * time.Second, 0}, {500 * time.Millisecond, 0}, // no burst before the first period ends
		{10 * time.Second, http.StatusServiceUnavailable}, {10500 * time.Millisecond, http.StatusServiceUnavailable},
		{11 * time.Second, 0}, {20200 * time.Millisecond, http.StatusServiceUnavailable},
	} {
		if got := s.failing(tc.at); got != tc.want {
			t.Errorf("at %v: %d, want %d", tc.at, got, tc.want)
		}
	}
}
