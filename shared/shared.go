// Package shared keeps endpoint health and sticky pins in Redis, so that
// several rotor instances agree: a breaker one of them opens is honoured by
// all, and a sticky key lands on the same endpoint whichever takes it
// (article 001's production section).
//
// Nothing on the pick path waits on Redis. Each outcome updates the local
// state at once and is queued; a sender applies queued outcomes to the
// shared copy with one Lua script each (EWMAs, counters and the breaker's
// transition in one atomic step, so two concurrent failures never both
// read 2 and write 3). A reader fetches the shared copy of every endpoint
// every Staleness and the local states adopt it. A sticky key new to an
// instance costs one round trip, bounded by Timeout.
//
// Redis down or slow (two failed operations in a row, so that one slow
// answer on a loaded machine is not an outage) means each instance serves
// on its local state: the client reports itself degraded (one log line
// per transition), drops the
// outcomes it cannot send, and fails sticky claims at once without
// waiting. Only the reader keeps asking, at jittered intervals that back
// off to a second, so instances do not return in a herd; when Redis
// answers again the states adopt the shared copy at the next read.
package shared

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/internal/secret"
)

// Options configure a Client.
type Options struct {
	// Addrs is one server, a Redis Cluster's seed nodes, or, with
	// MasterName, the Sentinels.
	Addrs      []string
	MasterName string
	Username   string
	Password   string
	DB         int
	Prefix     string        // every key starts with it; "rotor:" when empty
	Staleness  time.Duration // how often the shared copy is read; 100ms when zero
	Timeout    time.Duration // every operation's bound; 50ms when zero
	TLS        *tls.Config
	Log        *slog.Logger
}

// The queue of outcomes waiting to be sent, and the most sent at once.
const (
	queueSize  = 16384
	batchSize  = 1024
	maxBackoff = time.Second
)

// Client is the connection to Redis that the stores of every pool share.
type Client struct {
	rdb redis.UniversalClient
	o   Options
	log *slog.Logger

	queue chan op

	mu     sync.Mutex
	stores map[string]*Store // guarded by mu; by pool

	degraded atomic.Bool
	failing  atomic.Int32 // failures in a row
	since    atomic.Int64 // unix ns of the last transition
	lastErr  atomic.Pointer[string]

	outcomes, scripts, reads, claims, touches, dropped atomic.Int64

	stop    chan struct{}
	wg      sync.WaitGroup
	started atomic.Bool
	closed  sync.Once
}

// op is one queued write: an outcome, or a sticky pin kept alive.
type op struct {
	key    string
	report health.Report
	touch  *touch
}

type touch struct {
	index, name string
	ttl         time.Duration
	max         int
}

// New makes a client; it connects lazily, so an unreachable Redis at
// start is a degraded state, not an error. Start runs it.
func New(o Options) (*Client, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("no Redis address")
	}
	if o.Prefix == "" {
		o.Prefix = "rotor:"
	}
	if o.Staleness <= 0 {
		o.Staleness = 100 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 o.Addrs,
		MasterName:            o.MasterName,
		Username:              o.Username,
		Password:              o.Password,
		DB:                    o.DB,
		TLSConfig:             o.TLS,
		DialTimeout:           o.Timeout,
		ReadTimeout:           o.Timeout,
		WriteTimeout:          o.Timeout,
		ContextTimeoutEnabled: true,
		// One retry: a pooled connection that Redis closed (a restart)
		// fails once, and that is not an outage. Every retry stays within
		// the operation's context.
		MaxRetries:      1,
		PoolSize:        8,
		DisableIdentity: true,
	})
	c := &Client{rdb: rdb, o: o, log: o.Log, queue: make(chan op, queueSize), stores: map[string]*Store{}, stop: make(chan struct{})}
	c.since.Store(time.Now().UnixNano())
	return c, nil
}

// Start runs the sender and the reader until Close.
func (c *Client) Start() {
	if c.started.Swap(true) {
		return
	}
	c.wg.Add(2)
	go c.sendLoop()
	go c.readLoop()
}

// Close stops the client; queued outcomes not yet sent are dropped.
func (c *Client) Close() {
	c.closed.Do(func() {
		close(c.stop)
		c.wg.Wait()
		_ = c.rdb.Close()
	})
}

// Status is the shared store's health, for /status and metrics.
type Status struct {
	Store   string    `json:"store"`
	Healthy bool      `json:"healthy"`
	Since   time.Time `json:"since"` // of the last change of Healthy
	Error   string    `json:"error,omitempty"`
	// Operations counts what was sent, by kind: outcomes, reads (one per
	// endpoint per Staleness), claims (a sticky key new to this instance)
	// and touches (a sticky pin kept alive); Scripts counts the outcome
	// scripts run (one per endpoint per batch of queued outcomes).
	Operations map[string]int64 `json:"operations"`
	// Dropped counts outcomes that never reached Redis (it was out of
	// reach, or the queue was full): they taught this instance only.
	Dropped int64 `json:"dropped_outcomes"`
}

// Status returns the client's health and counters.
func (c *Client) Status() Status {
	st := Status{Store: "redis", Healthy: !c.degraded.Load(), Since: time.Unix(0, c.since.Load()),
		Dropped: c.dropped.Load(), Operations: map[string]int64{
			"outcome": c.outcomes.Load(), "outcome_script": c.scripts.Load(), "read": c.reads.Load(), "claim": c.claims.Load(), "touch": c.touches.Load(),
		}}
	if e := c.lastErr.Load(); e != nil && !st.Healthy {
		st.Error = *e
	}
	return st
}

// Degraded reports that Redis is out of reach and the instance serves on
// its local state.
func (c *Client) Degraded() bool { return c.degraded.Load() }

// outageAfter is how many failures in a row make an outage: one slow
// answer on a loaded machine is not one.
const outageAfter = 2

// fail notes an error reaching Redis: the second in a row turns the
// client degraded, logged once, and every state local.
func (c *Client) fail(err error) {
	msg := secret.Text(err.Error())
	c.lastErr.Store(&msg)
	if c.failing.Add(1) < outageAfter || c.degraded.Swap(true) {
		return
	}
	c.since.Store(time.Now().UnixNano())
	what := "state store out of reach"
	if refused(msg) {
		what = "state store refused rotor's credentials"
	}
	c.log.Warn(what+": serving on local state", "store", "redis", "error", msg)
	c.each(func(_ string, st *health.State) { st.Unshare() })
}

// refused reports whether Redis answered, and the answer was that the
// user, password or ACL does not let rotor in: a wrong config, not an
// outage.
func refused(msg string) bool {
	for _, code := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.Contains(msg, code) {
			return true
		}
	}
	return false
}

// ok notes a success: the failures in a row start again from none, and a
// degraded client recovers, logged once (only the reader asks while it is
// degraded).
func (c *Client) ok() {
	c.failing.Store(0)
	if !c.degraded.Swap(false) {
		return
	}
	down := time.Since(time.Unix(0, c.since.Load())).Round(time.Millisecond)
	c.since.Store(time.Now().UnixNano())
	c.log.Info("state store reachable again: sharing state", "store", "redis", "after", down.String())
}

// Store returns the health store of one pool, made the first time.
func (c *Client) Store(pool string) *Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stores[pool]
	if s == nil {
		s = &Store{c: c, pool: pool, mem: health.NewMemoryStore()}
		c.stores[pool] = s
	}
	return s
}

func (c *Client) each(f func(key string, st *health.State)) {
	c.mu.Lock()
	stores := make([]*Store, 0, len(c.stores))
	for _, s := range c.stores {
		stores = append(stores, s)
	}
	c.mu.Unlock()
	for _, s := range stores {
		s.mem.Each(func(name string, st *health.State) { f(s.key(name), st) })
	}
}

// Store is one pool's endpoint health: states in memory, as every pick
// reads them, and their outcomes shared through Redis.
type Store struct {
	c    *Client
	pool string
	mem  *health.MemoryStore
}

var _ health.Store = (*Store)(nil)

// key is the Redis key of an endpoint's shared state: stable, and the
// same for every instance with the same config.
func (s *Store) key(name string) string {
	return s.c.o.Prefix + "ep:" + url.PathEscape(s.pool) + "/" + url.PathEscape(name)
}

// Acquire returns the named state; a new one reports its outcomes.
func (s *Store) Acquire(name string) (*health.State, bool) {
	st, created := s.mem.Acquire(name)
	if created {
		key := s.key(name)
		st.SetReporter(func(r health.Report) { s.c.enqueue(op{key: key, report: r}) })
	}
	return st, created
}

// Release counts one holder less.
func (s *Store) Release(name string) { s.mem.Release(name) }

// Names lists the names held, sorted.
func (s *Store) Names() []string { return s.mem.Names() }

// enqueue queues a write without waiting: while degraded, or with the
// queue full, an outcome is dropped (counted) and a touch skipped.
func (c *Client) enqueue(o op) {
	if c.degraded.Load() {
		if o.touch == nil {
			c.dropped.Add(1)
		}
		return
	}
	select {
	case c.queue <- o:
	default:
		if o.touch == nil {
			c.dropped.Add(1)
		}
	}
}

func (c *Client) sendLoop() {
	defer c.wg.Done()
	batch := make([]op, 0, batchSize)
	for {
		select {
		case <-c.stop:
			return
		case o := <-c.queue:
			batch = append(batch[:0], o)
		}
	more:
		for len(batch) < batchSize {
			select {
			case o := <-c.queue:
				batch = append(batch, o)
			default:
				break more
			}
		}
		c.send(batch)
	}
}

// send applies a batch in one pipeline; after a Redis restart (its
// script cache empty) it loads the scripts and sends again. The sender is
// not on any request's path, so it waits longer than Timeout (at least
// senderTimeout) and tries a failed batch twice: a slow moment does not
// lose outcomes. The reader is what notices an outage quickly.
func (c *Client) send(batch []op) {
	for try := 0; try < 3; try++ {
		if c.degraded.Load() {
			break
		}
		err := c.sendOnce(batch)
		if err == nil {
			return
		}
		if isNoScript(err) {
			if err = c.loadScripts(); err == nil {
				continue
			}
		}
		if try == 1 || c.stopped() {
			c.fail(err)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.count(batch, &c.dropped)
}

// senderTimeout is the least a batch may take: outcomes are worth waiting
// for off the request path.
const senderTimeout = 250 * time.Millisecond

func (c *Client) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

func (c *Client) sendOnce(batch []op) error {
	ctx, cancel := context.WithTimeout(context.Background(), max(c.o.Timeout, senderTimeout)*time.Duration(1+len(batch)/256))
	defer cancel()
	pipe := c.rdb.Pipeline()
	// One script per endpoint: its outcomes in order, in one call.
	args := map[string][]any{}
	var order []string
	for _, o := range batch {
		if o.touch != nil {
			claimScript.EvalSha(ctx, pipe, []string{o.key, o.touch.index}, o.touch.name, o.touch.ttl.Milliseconds(), nowMS(), o.touch.max, 0)
			continue
		}
		r := o.report
		if _, ok := args[o.key]; !ok {
			order = append(order, o.key)
		}
		args[o.key] = append(args[o.key], b01(r.OK), r.Latency.Seconds(), r.At.UnixMilli(),
			r.SuccessDecay, r.LatencyDecay, r.Threshold, r.Cooldown.Milliseconds(), b01(r.Probe))
	}
	for _, key := range order {
		outcomeScript.EvalSha(ctx, pipe, []string{key}, args[key]...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for _, o := range batch {
		if o.touch != nil {
			c.touches.Add(1)
		} else {
			c.outcomes.Add(1)
		}
	}
	c.scripts.Add(int64(len(order)))
	c.failing.Store(0)
	return nil
}

// count adds the outcomes (not the touches) of batch to n.
func (c *Client) count(batch []op, n *atomic.Int64) {
	for _, o := range batch {
		if o.touch == nil {
			n.Add(1)
		}
	}
}

func b01(b bool) int {
	if b {
		return 1
	}
	return 0
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

func (c *Client) loadScripts() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.o.Timeout)
	defer cancel()
	for _, s := range []*redis.Script{outcomeScript, claimScript} {
		if err := s.Load(ctx, c.rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}

func nowMS() int64 { return time.Now().UnixMilli() }

// readLoop reads the shared copy every Staleness, jittered by a tenth so
// that instances spread their reads; while Redis is out of reach the
// interval backs off to a second, also jittered.
func (c *Client) readLoop() {
	defer c.wg.Done()
	backoff := time.Duration(0)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if err := c.refresh(); err != nil {
			c.fail(err)
			backoff = min(max(2*backoff, c.o.Staleness), maxBackoff)
		} else {
			c.ok()
			backoff = 0
		}
		next := c.o.Staleness + backoff
		t.Reset(next + time.Duration((rand.Float64()-0.5)*0.2*float64(next)))
	}
}

var fields = []string{"success", "latency", "timed", "samples", "breaker", "open_until", "gen", "successes", "failures", "opens"}

// refresh reads every held endpoint's shared copy and adopts it.
func (c *Client) refresh() error {
	type item struct {
		st  *health.State
		cmd *redis.SliceCmd
	}
	var items []item
	ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
	defer cancel()
	pipe := c.rdb.Pipeline()
	c.each(func(key string, st *health.State) {
		items = append(items, item{st, pipe.HMGet(ctx, key, fields...)})
	})
	if len(items) == 0 {
		return c.rdb.Ping(ctx).Err()
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	c.reads.Add(int64(len(items)))
	now := time.Now()
	for _, it := range items {
		sh, err := parseShared(it.cmd.Val())
		if err != nil {
			return err
		}
		it.st.Adopt(sh, now)
	}
	return nil
}

// parseShared reads the fields of an endpoint's hash; a missing hash is
// an endpoint no instance has reported yet.
func parseShared(v []any) (health.Shared, error) {
	var sh health.Shared
	num := func(i int) float64 {
		s, _ := v[i].(string)
		var f float64
		if s != "" {
			_, _ = fmt.Sscan(s, &f)
		}
		return f
	}
	if len(v) != len(fields) {
		return sh, fmt.Errorf("shared state: %d fields, want %d", len(v), len(fields))
	}
	sh.Success, sh.Latency = num(0), num(1)
	sh.Timed = num(2) == 1
	sh.Samples = int64(num(3))
	sh.Open = num(4) == 1
	sh.OpenUntil = time.UnixMilli(int64(num(5)))
	sh.Gen = uint64(num(6))
	sh.Successes, sh.Failures, sh.Opens = int64(num(7)), int64(num(8)), int64(num(9))
	return sh, nil
}

// Shared returns the shared copy of one endpoint now, read from Redis:
// for tests and tools, not the pick path.
func (s *Store) Shared(ctx context.Context, name string) (health.Shared, error) {
	v, err := s.c.rdb.HMGet(ctx, s.key(name), fields...).Result()
	if err != nil {
		return health.Shared{}, err
	}
	return parseShared(v)
}

// LogTo sends what the Redis client library logs of its own (a pool's
// dropped connection, a failed handshake) to l, as warnings in l's
// format, secrets taken out, instead of lines of its own on stderr. It
// sets the library's logger, which is the process's.
func LogTo(l *slog.Logger) { redis.SetLogger(libLog{l}) }

type libLog struct{ l *slog.Logger }

func (g libLog) Printf(ctx context.Context, format string, v ...any) {
	g.l.WarnContext(ctx, "state store client", "said", secret.Text(strings.TrimSpace(fmt.Sprintf(format, v...))))
}
