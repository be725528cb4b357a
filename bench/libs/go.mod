module github.com/rotor-lb/rotor/bench/libs

go 1.26.0

require (
	github.com/buraksezer/consistent v0.10.0
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/dgryski/go-jump v0.0.0-20170409065014-e1f439676b57
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f
	github.com/golang/groupcache v0.0.0-20241129210726-2c02b8208cf8
	github.com/rotor-lb/rotor v0.0.0
	github.com/serialx/hashring v0.0.0-20200727003509-22c0c7ab6b1b
	github.com/sony/gobreaker/v2 v2.4.0
	github.com/stathat/consistent v1.0.0
)

replace github.com/rotor-lb/rotor => ../..
