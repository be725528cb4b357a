package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
)

// Control is what the admin listener may ask of the server.
type Control interface {
	Pools() []PoolView
	// Reload loads the config file again; a bad one changes nothing.
	Reload() error
	// ReloadStatus says how the last reload went.
	ReloadStatus() ReloadStatus
}

// ReloadStatus is the outcome of the last reload.
type ReloadStatus struct {
	Generation int       `json:"generation"` // configs loaded, the first included
	At         time.Time `json:"at"`
	Error      string    `json:"error,omitempty"` // the last reload's error; the previous config still serves
}

// ErrUnknown means no such pool or endpoint.
var ErrUnknown = errors.New("no such pool or endpoint")

// Handler returns the admin mux.
func Handler(c Control, m *Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, status(c))
	})
	mux.HandleFunc("POST /admin/reload", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Reload(); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, c.ReloadStatus())
	})
	mux.HandleFunc("POST /admin/endpoints/{pool}/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
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
	})
	return mux
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
	Reload ReloadStatus `json:"reload"`
	Pools  []PoolStatus `json:"pools"`
}

// PoolStatus is one pool in /status.
type PoolStatus struct {
	Name      string           `json:"name"`
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
	doc := StatusDoc{Reload: c.ReloadStatus()}
	now := time.Now()
	for _, pv := range c.Pools() {
		ps := PoolStatus{Name: pv.Name, Policy: pv.Snapshot.Policy(), Stats: pv.Snapshot.Pool().Stats()}
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
