package server

import (
	"log/slog"
	"reflect"

	"github.com/rotor-lb/rotor/admin"
	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/shared"
)

// newShared makes the Redis client of a state section, without dialling:
// a Redis out of reach at start is a degraded state, not an error. Errors
// name the field (a TLS file that does not load, say).
func newShared(st config.State, log *slog.Logger) (*shared.Client, error) {
	o := shared.Options{Addrs: st.Addresses, MasterName: st.MasterName, Username: st.Username, Password: st.Password,
		DB: st.DB, Prefix: st.Prefix, Staleness: st.Staleness, Timeout: st.Timeout, Log: log}
	if st.Address != "" {
		o.Addrs = []string{st.Address}
	}
	if t := st.TLS; t != nil {
		var err error
		if o.TLS, _, err = clientTLS("state.tls", t); err != nil {
			return nil, err
		}
	}
	return shared.New(o)
}

// store is where a new pool keeps its endpoints' health: Redis-backed
// when the state is shared, else the pool's own memory.
func (s *Server) store(pool string) health.Store {
	if s.shared != nil {
		return s.shared.Store(pool)
	}
	return nil // balance.NewPool makes a memory store
}

// share makes a new sticky policy's table shared, when the state is.
func (s *Server) share(pool string, pol balance.Policy, entries int) {
	if st, ok := pol.(*balance.Sticky); ok && s.shared != nil {
		if entries == 0 {
			entries = balance.DefaultStickyEntries
		}
		st.ShareWith(s.shared.Sticky(pool, entries))
	}
}

// State says which state store is in use and how it is.
func (s *Server) State() admin.StateStatus {
	if s.shared == nil {
		return admin.StateStatus{Store: "memory", Healthy: true}
	}
	st := s.shared.Status()
	return admin.StateStatus{Store: st.Store, Healthy: st.Healthy, Since: st.Since, Error: st.Error,
		Operations: st.Operations, Dropped: st.Dropped}
}

// sameState reports whether two configs keep state in the same place: the
// store cannot change without a restart.
func sameState(a, b config.State) bool { return reflect.DeepEqual(a, b) }
