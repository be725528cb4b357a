package placement

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// Hash names the stable hash a placer puts keys and nodes through. It is
// never Go's map hash, which is seeded per process: two rotor instances must
// place every key alike.
type Hash int

const (
	// XXHash is xxHash64: fast, 64 bits, the default.
	XXHash Hash = iota
	// MD5 takes the first 4 bytes of the MD5 digest, big-endian, as a 32-bit
	// value. It is slower and coarser than XXHash; it exists so that a ring
	// can reproduce the reference ring of article 000 key for key.
	MD5
)

// String returns the name ParseHash accepts.
func (h Hash) String() string {
	switch h {
	case XXHash:
		return "xxhash"
	case MD5:
		return "md5"
	}
	return fmt.Sprintf("Hash(%d)", int(h))
}

// ParseHash turns "xxhash" or "md5" into a Hash.
func ParseHash(s string) (Hash, error) {
	switch s {
	case "xxhash", "":
		return XXHash, nil
	case "md5":
		return MD5, nil
	}
	return 0, fmt.Errorf("%q is not a hash (xxhash, md5)", s)
}

// Sum hashes s.
func (h Hash) Sum(s string) uint64 {
	if h == MD5 {
		d := md5.Sum([]byte(s))
		return uint64(binary.BigEndian.Uint32(d[:4]))
	}
	return xxhash.Sum64String(s)
}

// mix64 is the finaliser of MurmurHash3: a bijection on uint64 that spreads
// every input bit over every output bit. Placers use it to derive more
// hashes from one without hashing the key's bytes again.
func mix64(x uint64) uint64 {
	x = premix(x)
	return x ^ x>>33
}

// premix is mix64 but for its last step, x ^= x>>33, which leaves the
// top 33 bits as they are: what a comparison of those bits needs.
func premix(x uint64) uint64 { return premixed(x ^ x>>33) }

// premixed is premix given its first step already taken: x^x>>33, which
// is linear in xor, so a placer can take it for a key and for a node
// apart (rendezvous).
func premixed(y uint64) uint64 {
	y *= 0xff51afd7ed558ccd
	y ^= y >> 33
	y *= 0xc4ceb9fe1a85ec53
	return y
}

// sumBytes is Sum for a byte slice, used while building tables so that
// point names need no string allocation.
func (h Hash) sumBytes(b []byte) uint64 {
	if h == MD5 {
		d := md5.Sum(b)
		return uint64(binary.BigEndian.Uint32(d[:4]))
	}
	return xxhash.Sum64(b)
}

// bits is how many bits of a Sum can be set.
func (h Hash) bits() uint {
	if h == MD5 {
		return 32
	}
	return 64
}

// Turn places a hash of h on a circle: the fraction of a turn, in [0, 1),
// that it lies clockwise from zero.
func (h Hash) Turn(sum uint64) float64 {
	return float64(sum) / math.Exp2(float64(h.bits()))
}
