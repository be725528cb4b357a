// Package rawio is the system calls rotor makes itself on a socket inside
// a syscall.RawConn's Read or Write, where the net package's own retrying
// does not reach: a read and a write, each made again when a signal
// interrupts it, a look at a socket that takes nothing from it, and a
// shutdown; on Linux also an epoll set of its own (Epoll), and sends to
// several sockets in one call (SendRing, an io_uring). On Linux the read
// and the write are recvfrom(2) and sendto(2), made raw (the scheduler
// not told: none of them blocks): a 100-byte message written and read
// back over loopback costs 0.76x what the net package's Write and Read
// cost (BenchmarkExchange).
//
// They need non-blocking sockets, which Unix systems give Go's net
// package; Supported says whether this system is one. Where it is not
// (Windows), every call fails and the callers take the net package's
// ordinary way instead: net/http for clients and backends, a goroutine's
// copy for relays.
package rawio
