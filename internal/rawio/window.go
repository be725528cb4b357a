package rawio

import (
	"math/bits"
	"unsafe"
)

// lineSize is what the kernel's copies between user memory and a
// socket's pages run fastest aligned to.
const lineSize = 64

// ChunkWindow returns the part of buf to read a body's next bytes into
// when they will leave as one HTTP/1.1 chunk: its size line, the bytes
// and CRLF, written together.
//
// The kernel copies a write into its socket pages where the last write
// ended, or from the start of a page once the reader took everything
// before it. Its copy (rep movsb on x86) runs at a fraction of its speed
// when the bytes' address and their place in the page differ in their
// offset within a 64-byte line: a 256 KiB chunk after its 7-byte size
// line, read into a buffer aligned on 64 bytes, cost 4-5x the copy of
// the same bytes without the line. So the window starts where the bytes
// fall after the size line, pages assumed to start a write aligned, and
// is sized so that the whole chunk is a multiple of 64 bytes: the next
// chunk then starts aligned whether the kernel goes on from the end of
// this one or starts a page again. (A buffer just over a power of 16 gets
// a window a digit shorter, under the power.)
//
// It aligns the write, not the read that fills the window: where the
// bytes lie in the pages they are read from is the sender's doing, out
// of sight here. A read that fills less of the window makes a chunk of
// another size, whose line may be a digit shorter and whose end falls
// elsewhere; it costs that chunk the alignment, never its bytes. Buffers
// under 8 KiB are returned whole.
func ChunkWindow(buf []byte) []byte {
	if len(buf) < 8<<10 {
		return buf
	}
	base := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % lineSize)
	// The size line of a chunk as long as the window: its hex digits and
	// CRLF. The window is at most 2*lineSize-2 shorter than buf.
	digits := hexDigits(len(buf) - 2*lineSize)
	line := digits + 2
	off := ((line-base)%lineSize + lineSize) % lineSize
	n := min(len(buf)-off, 1<<(4*digits)-1) // buf just over a power of 16: a digit short
	n -= (line + n + 2) % lineSize
	return buf[off : off+n : off+n]
}

// hexDigits is how many hex digits n > 0 is written in.
func hexDigits(n int) int { return (bits.Len(uint(n)) + 3) / 4 }
