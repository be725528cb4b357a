package admin

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/webui"
)

// Control is what the admin listener may ask of the server.
type Control interface {
	Pools() []PoolView
	Listeners() []ListenerView
	// Reload loads the config file again; a bad one changes nothing.
	Reload() error
	// ReloadStatus says how the last reload went.
	ReloadStatus() ReloadStatus
	// State says which state store is in use and how it is.
	State() StateStatus
}

// StateStatus is the state store's health: memory, or Redis shared by
// several instances (degraded while out of reach, each then serving on
// its local state).
type StateStatus struct {
	Store      string           `json:"store"` // memory or redis
	Healthy    bool             `json:"healthy"`
	Since      time.Time        `json:"since,omitzero"` // of the last change of Healthy
	Error      string           `json:"error,omitempty"`
	Operations map[string]int64 `json:"operations,omitempty"`
	Dropped    int64            `json:"dropped_outcomes,omitempty"`
}

// ReloadStatus is the outcome of the last reload.
type ReloadStatus struct {
	Generation int       `json:"generation"` // configs loaded, the first included
	At         time.Time `json:"at"`
	Error      string    `json:"error,omitempty"` // the last reload's error; the previous config still serves
}

// ErrUnknown means no such pool or endpoint.
var ErrUnknown = errors.New("no such pool or endpoint")

// ListenerView is one bound listener, as /status shows it.
type ListenerView struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Addr string `json:"addr"`
}

// Options configure the admin handler.
type Options struct {
	// Token, when set, must come with every change (drain, undrain,
	// reload) as "Authorization: Bearer TOKEN".
	Token string
	// Loopback says the admin listener is bound to a loopback address.
	// Without a token, changes are accepted only there.
	Loopback bool
	// History, when set, is served at /ui/history for the live page.
	History *History
}

// Handler returns the admin mux: /metrics, /healthz, /status, the live
// page at /ui, and the changes, which are POSTs refused across sites
// (Sec-Fetch-Site and Origin, net/http's CrossOriginProtection) and
// guarded by the token when one is set.
func Handler(c Control, m *Metrics, o Options) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /ui", webui.Page("live.html"))
	mux.Handle("GET /ui/assets/", http.StripPrefix("/ui/assets/", webui.Assets()))
	mux.HandleFunc("GET /ui/history", func(w http.ResponseWriter, r *http.Request) {
		if o.History == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no history is kept"})
			return
		}
		writeJSON(w, http.StatusOK, o.History.Doc())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, status(c))
	})
	mux.Handle("POST /admin/reload", o.guard(func(w http.ResponseWriter, r *http.Request) {
		if err := c.Reload(); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, c.ReloadStatus())
	}))
	mux.Handle("POST /admin/endpoints/{pool}/{name}/{action}", o.guard(func(w http.ResponseWriter, r *http.Request) {
		action := r.PathValue("action")
		if action != "drain" && action != "undrain" {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "action must be drain or undrain"})
			return
		}
		ep := find(c, r.PathValue("pool"), r.PathValue("name"))
		if ep == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": ErrUnknown.Error()})
			return
		}
		ep.State.SetDraining(action == "drain")
		writeJSON(w, http.StatusOK, ep.Snapshot(time.Now()))
	}))
	return mux
}

// guard lets a change through only from this site, and only with the
// token when one is set; without one, only on a loopback listener.
func (o Options) guard(next http.HandlerFunc) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused: changes come from the admin listener's own pages or from tools"})
	}))
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case o.Token != "":
			scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(o.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="rotor admin"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "this change needs the admin token (Authorization: Bearer TOKEN)"})
				return
			}
		case !o.Loopback:
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "changes are refused: admin.listen is not a loopback address and admin.token is not set"})
			return
		}
		next(w, r)
	}))
}

func find(c Control, pool, name string) *balance.Endpoint {
	for _, pv := range c.Pools() {
		if pv.Name == pool {
			return pv.Snapshot.Get(name)
		}
	}
	return nil
}

// StatusDoc is the /status document.
type StatusDoc struct {
	Reload    ReloadStatus   `json:"reload"`
	State     StateStatus    `json:"state"`
	Listeners []ListenerView `json:"listeners"`
	Pools     []PoolStatus   `json:"pools"`
}

// PoolStatus is one pool in /status.
type PoolStatus struct {
	Name      string           `json:"name"`
	DNS       *DNSStatus       `json:"dns,omitempty"`
	Policy    string           `json:"policy"`
	Stats     balance.Stats    `json:"stats"`
	Endpoints []EndpointStatus `json:"endpoints"`
}

// EndpointStatus is one endpoint in /status.
type EndpointStatus struct {
	Address string `json:"address"` // credentials redacted
	Weight  int    `json:"weight"`
	Backup  bool   `json:"backup"`
	health.Snapshot
}

func status(c Control) StatusDoc {
	doc := StatusDoc{Reload: c.ReloadStatus(), State: c.State(), Listeners: c.Listeners()}
	now := time.Now()
	for _, pv := range c.Pools() {
		ps := PoolStatus{Name: pv.Name, Policy: pv.Snapshot.Policy(), Stats: pv.Snapshot.Pool().Stats()}
		if pv.DNS != nil {
			ps.DNS = pv.DNS()
		}
		for _, ep := range pv.Snapshot.Endpoints() {
			ps.Endpoints = append(ps.Endpoints, EndpointStatus{
				Address: ep.Addr, Weight: ep.Weight, Backup: ep.Backup, Snapshot: ep.Snapshot(now),
			})
		}
		doc.Pools = append(doc.Pools, ps)
	}
	return doc
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
