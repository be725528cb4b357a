package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// sharedConfig is one of several rotor instances on one Redis: a pool app
// (round robin over a and b, with a retry), a pool sessions (sticky by
// X-User) and a pool count (a alone, no retry).
func sharedConfig(redisAddr, a, b string) string {
	return fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
state: {store: redis, address: %q, prefix: "it:", staleness: 50ms, timeout: 50ms}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:0", pool: app}
  - {name: sessions, kind: http, listen: "127.0.0.1:0", pool: sessions}
  - {name: count, kind: http, listen: "127.0.0.1:0", pool: count}
pools:
  - name: app
    policy: round_robin
    endpoints: [{name: a, url: %q}, {name: b, url: %q}]
    retries: {attempts: 2}
    health: {breaker: {threshold: 3, cooldown: 1m}}
  - name: sessions
    policy: sticky
    key: {header: X-User}
    endpoints: [{name: a, url: %q}, {name: b, url: %q}]
  - name: count
    endpoints: [{name: a, url: %q}]
    retries: {attempts: 1}
`, redisAddr, a, b, a, b, a)
}

type statusDoc struct {
	State struct {
		Store   string `json:"store"`
		Healthy bool   `json:"healthy"`
	} `json:"state"`
	Pools []struct {
		Name      string `json:"name"`
		Endpoints []struct {
			Name    string `json:"name"`
			Breaker string `json:"breaker"`
			Source  string `json:"state_source"`
		} `json:"endpoints"`
	} `json:"pools"`
}

func (p *proc) status() statusDoc {
	p.t.Helper()
	var doc statusDoc
	if err := json.Unmarshal([]byte(p.admin("/status")), &doc); err != nil {
		p.t.Fatal(err)
	}
	return doc
}

// endpoint returns one endpoint's breaker and state source in /status.
func (p *proc) endpoint(pool, name string) (breaker, source string) {
	for _, pl := range p.status().Pools {
		for _, e := range pl.Endpoints {
			if pl.Name == pool && e.Name == name {
				return e.Breaker, e.Source
			}
		}
	}
	p.t.Fatalf("no endpoint %s/%s in /status", pool, name)
	return "", ""
}

func getBody(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Three rotor serve processes on one redis-server agree: a breaker opened
// through one is honoured by the others, a sticky key lands on the same
// endpoint through each, failures from all three count exactly, and
// Redis killed under load fails no request.
func TestSharedStateAcrossInstances(t *testing.T) {
	rd := testtool.Redis(t)
	a, b := newBackend(t, "a"), newBackend(t, "b")
	cfg := sharedConfig(rd.Addr, a.URL, b.URL)
	rotors := []*proc{start(t, cfg), start(t, cfg), start(t, cfg)}
	for i, p := range rotors {
		if st := p.status().State; st.Store != "redis" {
			t.Fatalf("rotor %d: state %+v", i, st)
		}
	}

	t.Run("breaker", func(t *testing.T) {
		a.set(503, 0, false) // retried on b
		defer a.set(0, 0, false)
		for i := 0; ; i++ {
			if br, _ := rotors[0].endpoint("app", "a"); br == "open" {
				break
			}
			if i == 50 {
				t.Fatal("a's breaker did not open through rotor 0")
			}
			if code, _ := getBody(t, rotors[0].url("web")); code != 200 {
				t.Fatalf("through rotor 0: %d (a retry should reach b)", code)
			}
		}
		took := eventually(t, time.Second, "rotors 1 and 2 see a's breaker open", func() bool {
			b1, s1 := rotors[1].endpoint("app", "a")
			b2, s2 := rotors[2].endpoint("app", "a")
			return b1 == "open" && b2 == "open" && s1 == "shared" && s2 == "shared"
		})
		figure(t, "shared breaker", "opened through one rotor, open in the other two after %v", took.Round(time.Millisecond))
		before := a.count()
		for _, p := range rotors[1:] {
			for range 20 {
				if code, body := getBody(t, p.url("web")); code != 200 || body != "b" {
					t.Fatalf("with a open: %d %q", code, body)
				}
			}
		}
		if a.count() != before {
			t.Fatalf("rotors 1 and 2 sent %d requests to a, whose breaker rotor 0 opened", a.count()-before)
		}
	})

	t.Run("sticky", func(t *testing.T) {
		for u := range 20 {
			user := fmt.Sprintf("user-%d", u)
			_, first := getBody(t, rotors[u%3].url("sessions"), "X-User", user)
			for _, p := range rotors {
				if code, body := getBody(t, p.url("sessions"), "X-User", user); code != 200 || body != first {
					t.Fatalf("%s: %d %q through one rotor, %q through the one that pinned it", user, code, body, first)
				}
			}
		}
	})

	t.Run("count", func(t *testing.T) {
		a.set(500, 0, false)
		defer a.set(0, 0, false)
		var wg sync.WaitGroup
		var sent atomic.Int64
		for g := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Timeout: 10 * time.Second}
				for i := g; i < 1000; i += 30 {
					resp, err := client.Get(rotors[i%3].url("count"))
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					sent.Add(1)
				}
			}()
		}
		wg.Wait()
		rc := redis.NewClient(&redis.Options{Addr: rd.Addr})
		defer rc.Close()
		var failures int64
		eventually(t, 5*time.Second, "1,000 failures counted in Redis", func() bool {
			failures, _ = rc.HGet(context.Background(), "it:ep:count/a", "failures").Int64()
			return failures >= 1000
		})
		time.Sleep(200 * time.Millisecond)
		failures, _ = rc.HGet(context.Background(), "it:ep:count/a", "failures").Int64()
		if sent.Load() != 1000 || failures != 1000 {
			t.Fatalf("%d requests sent, %d failures counted in Redis: want exactly 1000", sent.Load(), failures)
		}
		figure(t, "shared counters", "1,000 concurrent failures through 3 instances: %d counted", failures)
	})

	t.Run("redis killed under load", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var ok, failed atomic.Int64
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Timeout: 10 * time.Second}
				for i := 0; ctx.Err() == nil; i++ {
					p := rotors[(g+i)%3]
					url := p.url("web")
					req, _ := http.NewRequest(http.MethodGet, url, nil)
					if i%2 == 1 {
						req, _ = http.NewRequest(http.MethodGet, p.url("sessions"), nil)
						req.Header.Set("X-User", fmt.Sprintf("load-%d", i%50))
					}
					resp, err := client.Do(req)
					if err != nil {
						failed.Add(1)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						ok.Add(1)
					} else {
						failed.Add(1)
					}
				}
			}()
		}
		time.Sleep(300 * time.Millisecond)
		rd.Kill()
		for i, p := range rotors {
			eventually(t, 3*time.Second, fmt.Sprintf("rotor %d degraded", i), func() bool { return p.metric("rotor_state_degraded") == 1 })
		}
		time.Sleep(500 * time.Millisecond)
		rd.Start()
		took := time.Duration(0)
		for i, p := range rotors {
			took = max(took, eventually(t, 5*time.Second, fmt.Sprintf("rotor %d back", i), func() bool {
				if p.metric("rotor_state_degraded") != 0 {
					return false
				}
				_, src := p.endpoint("app", "b")
				return src == "shared"
			}))
		}
		time.Sleep(200 * time.Millisecond)
		cancel()
		wg.Wait()
		if failed.Load() != 0 || ok.Load() < 100 {
			t.Fatalf("with Redis killed and restarted: %d requests failed, %d succeeded", failed.Load(), ok.Load())
		}
		for i, p := range rotors {
			if n := countLines(p.logs.String(), "state store out of reach"); n != 1 {
				t.Errorf("rotor %d logged the outage %d times, want once", i, n)
			}
		}
		figure(t, "shared state, Redis killed", "%d requests through 3 instances, 0 failed; shared again %v after the restart",
			ok.Load(), took.Round(time.Millisecond))
	})
}

func countLines(s, sub string) int { return strings.Count(s, sub) }
