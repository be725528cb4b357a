// Package rawio is the system calls rotor makes itself inside a
// syscall.RawConn's Read, where the net package's own retrying does not
// reach: a read and a write, each made again when a signal interrupts it,
// a look at a socket that takes nothing from it, and a shutdown.
//
// They need non-blocking sockets, which Unix systems give Go's net
// package; Supported says whether this system is one. Where it is not
// (Windows), every call fails and the callers take the net package's
// ordinary way instead: net/http for clients and backends, a goroutine's
// copy for relays.
package rawio
