package sim

import (
	"math"
	"math/rand/v2"
)

// stream is a seeded source for the workload: arrivals, service times, keys
// and costs. It is separate from the policies' source, so every policy
// sees the same requests.
type stream struct{ r *rand.Rand }

func newStream(seed uint64) *stream {
	return &stream{r: rand.New(rand.NewPCG(seed, 0x5eed))}
}

func (s *stream) float() float64 { return s.r.Float64() }

func (s *stream) exp(mean float64) float64 { return s.r.ExpFloat64() * mean }

// lognormal with the given mean and sigma of the underlying normal.
func (s *stream) lognormal(mean, sigma float64) float64 {
	mu := math.Log(mean) - sigma*sigma/2
	return math.Exp(mu + sigma*s.r.NormFloat64())
}

func (s *stream) intn(n int) int { return s.r.IntN(n) }
