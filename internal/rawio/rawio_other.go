//go:build !unix || norawio

package rawio

import "errors"

// Supported: this system's sockets cannot be read and written raw; the
// calls below all fail with errUnsupported.
const Supported = false

var errUnsupported = errors.New("rawio: no raw socket access on this system")

// Read fails: see Supported.
func Read(fd uintptr, p []byte) (int, error) { return 0, errUnsupported }

// Send fails: see Supported.
func Send(fd uintptr, p []byte) (int, error) { return 0, errUnsupported }

// Write fails: see Supported.
func Write(fd uintptr, p []byte) (int, error) { return 0, errUnsupported }

// Sendv fails: see Supported.
func Sendv(fd uintptr, bufs [][]byte) (int, error) { return 0, errUnsupported }

// Writev fails: see Supported.
func Writev(fd uintptr, bufs [][]byte) (int, error) { return 0, errUnsupported }

// Peek fails: see Supported.
func Peek(fd uintptr) (int, error) { return 0, errUnsupported }

// Look fails: see Supported.
func Look(fd uintptr, p []byte) (int, error) { return 0, errUnsupported }

// Shutdown fails: see Supported.
func Shutdown(fd uintptr) error { return errUnsupported }

// Unsent fails: see Supported.
func Unsent(fd uintptr) (n int, ok bool) { return 0, false }
