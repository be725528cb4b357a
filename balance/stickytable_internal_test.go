package balance

import (
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rotor-lb/rotor/health"
)

const tableTTL = int64(time.Minute)

// hit is a table hit at now: the pin, renewed, or nil.
func hit(sh *shard, hash uint64, key string, now int64) *pin {
	pn := sh.get(hash, key, now)
	if pn != nil {
		sh.seen(pn, now, tableTTL)
	}
	return pn
}

// A full shard forgets the key seen least recently: a key put first but
// seen since outlives the keys put after it and not seen again.
func TestShardEvictsLeastRecentlySeen(t *testing.T) {
	sh := newShard(4)
	now := int64(time.Hour)
	for i, k := range []string{"a", "b", "c", "d"} {
		sh.put(uint64(i), k, "e"+k, now, tableTTL)
		now += int64(time.Second)
	}
	// Seen again, in this order: a, then c.
	for _, k := range []struct {
		key  string
		hash uint64
	}{{"a", 0}, {"c", 2}} {
		if hit(sh, k.hash, k.key, now) == nil {
			t.Fatalf("%s not found", k.key)
		}
		now += int64(time.Second)
	}
	// Least recently seen now: b, d, a, c.
	for i, want := range []string{"b", "d", "a", "c"} {
		key := "new" + strconv.Itoa(i)
		if !sh.put(uint64(100+i), key, "x", now, tableTTL) {
			t.Fatalf("put %s into a full shard evicted nothing", key)
		}
		now += int64(time.Second)
		if sh.get(map[string]uint64{"a": 0, "b": 1, "c": 2, "d": 3}[want], want, now) != nil {
			t.Fatalf("put %d: %s should have gone, as the least recently seen", i, want)
		}
		if got := sh.len(); got != 4 {
			t.Fatalf("%d pins, want 4", got)
		}
	}
}

// A pin lives a TTL after it was last seen, to the 64th of the TTL a
// renewal is rounded to, and an expired pin is not found.
func TestShardExpiry(t *testing.T) {
	sh := newShard(8)
	now := int64(time.Hour)
	sh.put(7, "k", "e", now, tableTTL)
	if hit(sh, 7, "k", now+tableTTL-1) == nil {
		t.Fatal("expired before the TTL")
	}
	// Renewed at now+TTL-1: lives until then plus a TTL.
	later := now + tableTTL - 1
	if sh.get(7, "k", later+tableTTL-tableTTL/64) == nil {
		t.Fatal("a renewed pin expired early")
	}
	if sh.get(7, "k", later+tableTTL) != nil {
		t.Fatal("found a TTL after it was last seen")
	}
	// A hit within a 64th of the TTL of the last renewal writes nothing.
	pn := sh.get(7, "k", later+1)
	before := pn.expires.Load()
	sh.seen(pn, later+tableTTL/128, tableTTL)
	if pn.expires.Load() != before {
		t.Fatal("renewed again within a 64th of the TTL")
	}
	// Expired pins at the old end go as other keys come.
	for i := range 3 {
		sh.put(uint64(10+i), "n"+strconv.Itoa(i), "e", later+2*tableTTL, tableTTL)
	}
	if got := sh.len(); got != 3 {
		t.Fatalf("%d pins after the expired one met the old end, want 3", got)
	}
}

// Keys that share a hash are told apart by the key, and taking one out
// (a tombstone in its slot) leaves the ones placed after it findable.
// Churn through a small shard keeps its slots small: tombstones are
// dropped when the slots are made again.
func TestShardCollisionsAndChurn(t *testing.T) {
	sh := newShard(8)
	now := int64(time.Hour)
	for i := range 8 {
		sh.put(42, "same"+strconv.Itoa(i), "e"+strconv.Itoa(i), now, tableTTL)
	}
	sh.put(42, "same3", "moved", now, tableTTL) // replaced in place of the old pin
	for i := range 8 {
		key := "same" + strconv.Itoa(i)
		pn := sh.get(42, key, now)
		want := "e" + strconv.Itoa(i)
		if i == 3 {
			want = "moved"
		}
		if pn == nil || pn.name != want {
			t.Fatalf("%s: got %v, want a pin to %s", key, pn, want)
		}
	}
	if got := sh.len(); got != 8 {
		t.Fatalf("%d pins, want 8", got)
	}
	for i := range 100_000 {
		sh.put(uint64(i)*0x9e3779b97f4a7c15, "churn"+strconv.Itoa(i), "e", now, tableTTL)
	}
	if n := len(*sh.slots.Load()); n > 64 {
		t.Fatalf("%d slots for 8 pins after churn", n)
	}
	for i := 100_000 - 8; i < 100_000; i++ {
		if sh.get(uint64(i)*0x9e3779b97f4a7c15, "churn"+strconv.Itoa(i), now) == nil {
			t.Fatalf("churn%d, among the last 8 put, not found", i)
		}
	}
}

// Hits read the slots, and renew and move what they find, while puts
// replace pins and, in a shard smaller than its keys, evict them; under
// -race this is the test that the lock-free read is safe, and the list
// must still hold exactly the pins in the slots.
func TestShardConcurrentHitsAndPuts(t *testing.T) {
	for _, max := range []int{64, 16} {
		sh := newShard(max)
		now := int64(time.Hour)
		for i := range 64 {
			sh.put(uint64(i)<<8, "k"+strconv.Itoa(i), "e", now, tableTTL)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 20_000 {
					k := (i*7 + g) % 64
					key := "k" + strconv.Itoa(k)
					if g%2 == 0 {
						hit(sh, uint64(k)<<8, key, now+int64(i)*int64(time.Second))
					} else {
						sh.put(uint64(k)<<8, key, "f", now, tableTTL)
					}
				}
			})
		}
		wg.Wait()
		if got := sh.len(); got != min(max, 64) {
			t.Fatalf("max %d: %d pins, want %d", max, got, min(max, 64))
		}
		listed := 0
		for pn := sh.oldest; pn != nil; pn = pn.next {
			if pn.gone || sh.find(pn.hash, pn.key) != pn {
				t.Fatalf("max %d: %s is listed but not in the slots", max, pn.key)
			}
			listed++
		}
		if listed != sh.live {
			t.Fatalf("max %d: %d pins listed, %d live", max, listed, sh.live)
		}
	}
}

// A pin keeps its own copy of the key, not the string the request's key
// was cut from (a request's head, whose bytes it would keep alive).
func TestPinKeepsACopyOfItsKey(t *testing.T) {
	st, err := NewSticky(StickyOptions{TTL: time.Minute, Inner: &RoundRobin{}})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPool("s", Options{})
	if err := p.Configure(Config{Policy: st, Endpoints: []EndpointConfig{{Name: "a"}, {Name: "b"}}}); err != nil {
		t.Fatal(err)
	}
	head := "GET /?user=u-1234 HTTP/1.1\r\nX-User: u-1234\r\n\r\n"
	key := head[strings.Index(head, "u-1234"):][:len("u-1234")]
	pk, err := p.Pick(Request{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	pk.Done(health.Outcome{Status: 200})
	h := maphash.String(st.seed, key)
	pn := st.shards[h%stickyShards].find(h, key)
	if pn == nil {
		t.Fatalf("no pin for %q", key)
	}
	if unsafe.StringData(pn.key) == unsafe.StringData(key) {
		t.Error("the pin holds the request's key string, not a copy of it")
	}
}
