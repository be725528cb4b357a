// Package reliability is rotor's reliability suite: tests that build the
// rotor binary, run it as a process on loopback against real backends,
// proxies and clients, attack it the ways an attack run did (signals and
// reloads under load, dead and hanging backends, slowloris, oversized and
// malformed requests, request smuggling, SSRF, leaked secrets, thousands
// of idle connections) and check what a user would: no failed request, no
// byte where it must not go, resources back to where they were.
//
// Each check prints its figure as a "FIGURE name | value" line, and
// appends it to the file ROTOR_FIGURES names, when set. `go test
// ./reliability` runs the short version (part of the test suite);
// ROTOR_LONG=1 runs the long one (more load, longer, more connections):
// bash bench/reliability.sh writes both reports. docs/RELIABILITY.md has
// the figures and the commands.
package reliability
