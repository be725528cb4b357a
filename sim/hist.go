package sim

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in log-linear buckets (HdrHistogram's idea):
// 64 linear sub-buckets per power of two, so any recorded value is known to
// within 1/64 (1.6%) whatever its size, in fixed memory, at the cost of one
// increment a record.
type Histogram struct {
	counts [64 * 64]uint64
	n      uint64
	sum    float64
	max    time.Duration
}

const subBits = 6 // 64 sub-buckets

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	exp := bits.Len64(v) - subBits // >= 1
	return exp<<subBits | int(v>>(exp-1)&(1<<subBits-1))
}

// lowest value of bucket b
func bucketLow(b int) uint64 {
	exp := b >> subBits
	if exp == 0 {
		return uint64(b)
	}
	return (1<<subBits | uint64(b&(1<<subBits-1))) << (exp - 1)
}

// Record adds one duration; negative ones count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	b := bucketOf(v)
	if b >= len(h.counts) {
		b = len(h.counts) - 1
	}
	h.counts[b]++
	h.n++
	h.sum += float64(v)
	h.max = max(h.max, d)
}

// Count returns how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Mean returns the exact mean.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Max returns the largest duration recorded.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the q-quantile (0 <= q <= 1), to within the bucket width:
// the middle of the bucket holding it.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for b, c := range h.counts {
		if seen += c; seen >= rank {
			lo := bucketLow(b)
			hi := bucketLow(b + 1)
			mid := time.Duration(lo + (hi-lo)/2)
			return min(mid, h.max)
		}
	}
	return h.max
}
