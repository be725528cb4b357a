//go:build unix

package server_test

import (
	"fmt"
	"syscall"
	"testing"
)

// deadAddr is a loopback address that refuses connections for the whole
// test: a socket bound to it and never listening holds its port. A port
// merely found free could be given to a listener started after it (the
// test's own rotor's, say: a tcp listener that proxies to itself makes a
// chain of connections, and of tries).
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
