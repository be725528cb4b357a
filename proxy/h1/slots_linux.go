//go:build !norawio

package h1

// slots numbers what waits in an epoll set of rotor's own (the ready
// queue's, the park's) by a small number an event carries, its slot, and
// the slot's generation beside it: an event of a slot's last holder,
// taken after the slot was given to another, is not the new holder's.
// The set's lock guards it.
type slots[T comparable] struct {
	held []T     // by slot, the zero T while free
	gens []int32 // by slot, its generation
	free []int32
}

// put gives v a slot and returns it with its generation.
func (s *slots[T]) put(v T) (slot, gen int32) {
	if n := len(s.free); n > 0 {
		slot = s.free[n-1]
		s.free = s.free[:n-1]
		s.gens[slot]++
	} else {
		var zero T
		slot = int32(len(s.held))
		s.held, s.gens = append(s.held, zero), append(s.gens, 0)
	}
	s.held[slot] = v
	return slot, s.gens[slot]
}

// at returns what holds slot in generation gen: the zero T if the slot
// is free, or held by another since.
func (s *slots[T]) at(slot, gen int32) T {
	var zero T
	if slot < 0 || int(slot) >= len(s.held) || s.gens[slot] != gen {
		return zero
	}
	return s.held[slot]
}

// release frees slot.
func (s *slots[T]) release(slot int32) {
	var zero T
	s.held[slot] = zero
	s.free = append(s.free, slot)
}
