package rawio

import (
	"strconv"
	"testing"
	"unsafe"
)

// A chunk window puts its bytes where they fall after their size line
// (both offsets alike within a 64-byte line) and makes the whole chunk a
// multiple of 64 bytes, whatever the buffer's size and alignment.
func TestChunkWindow(t *testing.T) {
	backing := make([]byte, 2<<20+2*lineSize)
	start := int((lineSize - uintptr(unsafe.Pointer(&backing[0]))%lineSize) % lineSize) // 64-aligned
	for _, size := range []int{8 << 10, 16<<10 + 5, 1 << 16, 1<<16 + 40, 1<<16 + 200, 256 << 10, 1 << 20, 1<<20 + 3} {
		for skew := range lineSize {
			buf := backing[start+skew : start+skew+size]
			w := ChunkWindow(buf)
			off := int(uintptr(unsafe.Pointer(&w[0])) - uintptr(unsafe.Pointer(&buf[0])))
			if off < 0 || off+len(w) > len(buf) || cap(w) != len(w) {
				t.Fatalf("size %d, skew %d: window [%d, %d) cap %d, outside a buffer of %d", size, skew, off, off+len(w), cap(w), len(buf))
			}
			line := len(strconv.FormatInt(int64(len(w)), 16)) + 2
			if got := int(uintptr(unsafe.Pointer(&w[0])) % lineSize); got != line%lineSize {
				t.Errorf("size %d, skew %d: the bytes start at %d within a line, want %d (after a %d-byte size line)", size, skew, got, line%lineSize, line)
			}
			if whole := line + len(w) + 2; whole%lineSize != 0 {
				t.Errorf("size %d, skew %d: a chunk of %d bytes is %d in all, not a multiple of %d", size, skew, len(w), whole, lineSize)
			}
			// As long as it can be: 2*lineSize shorter at the most, but
			// under the power of 16 a buffer is just over.
			want := size - 2*lineSize + 2
			if p := 1 << (4 * (len(strconv.FormatInt(int64(size), 16)) - 1)); size-2*lineSize < p {
				want = p - 2*lineSize + 2
			}
			if len(w) < want {
				t.Errorf("size %d, skew %d: a window of %d, want %d at least", size, skew, len(w), want)
			}
		}
	}
	small := make([]byte, 8<<10-1)
	if w := ChunkWindow(small); len(w) != len(small) || &w[0] != &small[0] {
		t.Errorf("a buffer under 8 KiB: window of %d, want the buffer", len(w))
	}
}
