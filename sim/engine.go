package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/rotor-lb/rotor/balance"
	"github.com/rotor-lb/rotor/health"
	"github.com/rotor-lb/rotor/proxy"
)

// Server is one simulated backend: a FIFO queue in front of Workers
// workers.
type Server struct {
	Name    string
	Workers int     // >= 1; 0 means 1
	Speed   float64 // 1 is nominal; 1/3 is three times slower; 0 means 1
	Weight  int     // for weighted policies; 0 means 1
	// ErrorRate is the probability that a request fails (a 500 after its
	// service time).
	ErrorRate float64
	// Windows are spans of virtual time in which the server answers every
	// request at once with a failure: blocked, or down.
	Windows []Window
	// Latency, when set, replaces the workload's service time for this
	// server: a route's own speed rather than work a worker does.
	Latency time.Duration
	// Backup servers take requests only while no other is available.
	Backup bool
	// Slowdowns make the server slower for a span of virtual time: a
	// request whose service starts inside one takes Factor times longer.
	Slowdowns []Slowdown
}

// Slowdown is a span of virtual time in which a server is Factor times
// slower. To zero means until the end of the run.
type Slowdown struct {
	Factor   float64
	From, To time.Duration
}

// factor is the slowdown at now: the product of those in force.
func (s *Server) factor(now time.Duration) float64 {
	f := 1.0
	for _, sd := range s.Slowdowns {
		if now >= sd.From && (sd.To == 0 || now < sd.To) {
			f *= sd.Factor
		}
	}
	return f
}

// Window is a span of virtual time during which a server fails requests.
type Window struct {
	From, To time.Duration
	Status   int           // the status answered; 0 means 503
	Latency  time.Duration // how fast the failure comes; 0 means 10 ms
}

// Workload is the stream of requests. The same Workload and Seed give the
// same requests, in the same order, at the same times, to every policy.
type Workload struct {
	Requests int
	// Rate is the mean arrival rate, requests per second (Poisson).
	Rate float64
	// Service is the mean service time of a request of cost 1 on a server
	// of speed 1.
	Service time.Duration
	// LogNormal draws service times from a log-normal of this sigma
	// instead of an exponential; 0 means exponential.
	LogNormal float64
	// CostSpread makes request cost uniform in [1, CostSpread] (work
	// varies that many times); 0 or 1 means every request costs 1.
	CostSpread float64
	// Users is how many distinct keys requests carry; 0 means 1000.
	Users int
	// HotShare is the share of requests sent by one user ("user-hot").
	HotShare float64
	// Trace, when set, replaces Poisson arrivals: one entry per request.
	Trace []TraceEntry
	Seed  uint64
}

// TraceEntry is one request of a trace file: "time,key,cost".
type TraceEntry struct {
	At   time.Duration
	Key  string
	Cost float64
}

// Result is one policy's run.
type Result struct {
	Policy    string        `json:"policy"`
	Requests  int           `json:"requests"`
	Failures  int           `json:"failures"`
	Unplaced  int           `json:"unplaced"` // no endpoint could be picked
	Mean      time.Duration `json:"mean_ns"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	P999      time.Duration `json:"p999_ns"`
	MaxQueue  int           `json:"max_queue"`
	Share     []float64     `json:"share"`      // of requests, per server
	MaxQueues []int         `json:"max_queues"` // per server
	Duration  time.Duration `json:"virtual_duration_ns"`
	Fallbacks int64         `json:"fallbacks"`
	Retries   int           `json:"retries"` // tries made again on another server
	Latency   *Histogram    `json:"-"`       // every request
	OK        *Histogram    `json:"-"`       // successful requests only
	Wall      time.Duration `json:"-"`
}

// Hooks let a scenario watch a run. Any may be nil.
type Hooks struct {
	// Picked is called when a request is sent to server i.
	Picked func(now time.Duration, server int)
	// Completed is called when a request on server i completes.
	Completed func(now time.Duration, server int, ok bool, latency time.Duration)
	// Progress is called every 65536 requests with the count so far.
	Progress func(done int)
}

type record struct {
	arrival time.Duration
	sent    time.Duration // when the current try was sent to its server
	work    float64       // seconds of work at speed 1 (service x cost)
	u       float64       // uniform draw for the error decision
	server  int32
	status  int32 // set when service starts inside a failure window
	flight  proxy.Flight
}

type event struct {
	at  time.Duration
	idx int32 // record index
}

type queue struct {
	buf        []int32
	head, size int
}

func (q *queue) push(x int32) {
	if q.size == len(q.buf) {
		n := make([]int32, max(16, 2*len(q.buf)))
		for i := range q.size {
			n[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = n, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = x
	q.size++
}

func (q *queue) pop() int32 {
	x := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return x
}

// Validate checks a workload and servers before a run.
func Validate(w Workload, servers []Server) error {
	if len(servers) == 0 {
		return errors.New("servers: at least one is required")
	}
	if w.Trace == nil {
		if w.Requests < 1 {
			return fmt.Errorf("requests: must be at least 1 (got %d)", w.Requests)
		}
		if !(w.Rate > 0) || math.IsInf(w.Rate, 0) {
			return fmt.Errorf("rate: must be positive (got %v)", w.Rate)
		}
	}
	if w.Service <= 0 {
		return fmt.Errorf("service: must be positive (got %v)", w.Service)
	}
	if w.HotShare < 0 || w.HotShare > 1 {
		return fmt.Errorf("hot: must be between 0 and 1 (got %v)", w.HotShare)
	}
	if w.CostSpread < 0 || w.LogNormal < 0 {
		return errors.New("cost spread and log-normal sigma must not be negative")
	}
	for i, s := range servers {
		for _, sd := range s.Slowdowns {
			if !(sd.Factor > 0) || math.IsInf(sd.Factor, 0) || sd.From < 0 || sd.To != 0 && sd.To <= sd.From {
				return fmt.Errorf("servers[%d]: slowdown x%v %v-%v: want a factor above 0 and a window that ends after it starts", i, sd.Factor, sd.From, sd.To)
			}
		}
		if s.Workers < 0 || s.Speed < 0 || s.ErrorRate < 0 || s.ErrorRate > 1 {
			return fmt.Errorf("servers[%d]: workers and speed must be positive, error rate in [0, 1]", i)
		}
	}
	return nil
}

// Endpoints returns the pool endpoints for servers, named s0, s1, ... unless
// named.
func Endpoints(servers []Server) []balance.EndpointConfig {
	eps := make([]balance.EndpointConfig, len(servers))
	for i, s := range servers {
		eps[i] = balance.EndpointConfig{Name: serverName(s, i), Weight: max(s.Weight, 1), Backup: s.Backup}
	}
	return eps
}

func serverName(s Server, i int) string {
	if s.Name != "" {
		return s.Name
	}
	return "s" + strconv.Itoa(i)
}

// Run sends the workload through pool to servers, on clock, and returns
// what happened. Each request runs the proxies' own lifecycle
// (proxy.Flight): the pool's fallback order, and retries on another
// server within its attempts and budget. pool's snapshot must be built
// with Endpoints(servers) on a balance pool that uses clock, and pool
// must use clock too; its policy and random source are the caller's.
func Run(ctx context.Context, w Workload, servers []Server, pool *proxy.Pool, clock *Clock, hooks Hooks) (Result, error) {
	if err := Validate(w, servers); err != nil {
		return Result{}, err
	}
	start := time.Now()
	index := make(map[*balance.Endpoint]int, len(servers))
	for i, ep := range pool.Snapshot.Endpoints() {
		index[ep] = i
	}
	if len(index) != len(servers) {
		return Result{}, fmt.Errorf("pool has %d endpoints for %d servers", len(index), len(servers))
	}
	e := &engine{
		w: w, servers: servers, pool: pool, clock: clock, hooks: hooks, index: index,
		busy: make([]int, len(servers)), queues: make([]queue, len(servers)),
		served: make([]int, len(servers)), maxQ: make([]int, len(servers)),
		res: Result{Policy: pool.Snapshot.Policy(), Latency: &Histogram{}, OK: &Histogram{}},
	}
	e.keys = makeKeys(max(w.Users, 1000))
	e.retry = newStream(w.Seed ^ 0x7e7)
	if err := e.run(ctx); err != nil {
		return Result{}, err
	}
	r := e.res
	r.Share = make([]float64, len(servers))
	for i, n := range e.served {
		if r.Requests > 0 {
			r.Share[i] = float64(n) / float64(r.Requests)
		}
		r.MaxQueue = max(r.MaxQueue, e.maxQ[i])
	}
	r.MaxQueues = e.maxQ
	r.Mean, r.P50, r.P99, r.P999 = r.Latency.Mean(), r.Latency.Quantile(0.5), r.Latency.Quantile(0.99), r.Latency.Quantile(0.999)
	r.Duration = clock.Elapsed()
	r.Fallbacks = pool.Snapshot.Pool().Stats().Fallbacks
	r.Wall = time.Since(start)
	return r, nil
}

func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	return keys
}

type engine struct {
	w       Workload
	servers []Server
	pool    *proxy.Pool
	clock   *Clock
	hooks   Hooks
	index   map[*balance.Endpoint]int
	keys    []string

	retry  *stream // draws for tries after the first, apart from the workload's
	recs   []record
	free   []int32
	heap   []event
	busy   []int
	queues []queue
	served []int
	maxQ   []int
	res    Result
}

func (e *engine) run(ctx context.Context) error {
	src := newStream(e.w.Seed)
	n := e.w.Requests
	if e.w.Trace != nil {
		n = len(e.w.Trace)
	}
	var next time.Duration // next arrival
	arrival := func(i int) (time.Duration, string, float64) {
		if e.w.Trace != nil {
			t := e.w.Trace[i]
			cost := t.Cost
			if cost == 0 {
				cost = 1
			}
			return t.At, t.Key, cost
		}
		next += time.Duration(src.exp(1/e.w.Rate) * 1e9)
		cost := 1.0
		if e.w.CostSpread > 1 {
			cost = 1 + src.float()*(e.w.CostSpread-1)
		}
		var key string
		if e.w.HotShare > 0 && src.float() < e.w.HotShare {
			key = "user-hot"
		} else {
			key = e.keys[src.intn(len(e.keys))]
		}
		return next, key, cost
	}
	mean := e.w.Service.Seconds()
	for i := 0; i < n; i++ {
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if e.hooks.Progress != nil && i > 0 {
				e.hooks.Progress(i)
			}
		}
		at, key, cost := arrival(i)
		var work float64
		if e.w.LogNormal > 0 {
			work = src.lognormal(mean, e.w.LogNormal) * cost
		} else {
			work = src.exp(mean) * cost
		}
		u := src.float()
		for len(e.heap) > 0 && e.heap[0].at <= at {
			e.complete()
		}
		e.clock.set(max(at, e.clock.now))
		e.arrive(key, work, u)
	}
	for len(e.heap) > 0 {
		e.complete()
	}
	if e.hooks.Progress != nil {
		e.hooks.Progress(n)
	}
	return nil
}

func (e *engine) arrive(key string, work, u float64) {
	e.res.Requests++
	idx := e.alloc()
	r := &e.recs[idx]
	r.arrival, r.work, r.u = e.clock.now, work, u
	e.pool.Begin(&r.flight, proxy.Request{Key: key, Idempotent: true})
	e.send(idx)
}

// send picks a server for request idx's next try and puts it there: on a
// worker, or in the server's queue.
func (e *engine) send(idx int32) {
	r := &e.recs[idx]
	ep, err := r.flight.Next()
	if err != nil {
		e.res.Unplaced++
		e.res.Failures++
		e.free = append(e.free, idx)
		return
	}
	s := e.index[ep]
	r.server, r.status, r.sent = int32(s), 0, e.clock.now
	e.served[s]++
	if e.hooks.Picked != nil {
		e.hooks.Picked(e.clock.now, s)
	}
	if e.busy[s] < max(e.servers[s].Workers, 1) {
		e.start(idx)
		return
	}
	q := &e.queues[s]
	q.push(idx)
	e.maxQ[s] = max(e.maxQ[s], q.size)
}

func (e *engine) alloc() int32 {
	if n := len(e.free); n > 0 {
		idx := e.free[n-1]
		e.free = e.free[:n-1]
		return idx
	}
	e.recs = append(e.recs, record{})
	return int32(len(e.recs) - 1)
}

// start puts request idx on a worker of its server now.
func (e *engine) start(idx int32) {
	r := &e.recs[idx]
	srv := &e.servers[r.server]
	e.busy[r.server]++
	now := e.clock.now
	var service time.Duration
	if w, ok := srv.window(now); ok {
		service = w.latency()
		r.status = int32(w.status())
	} else {
		sec := r.work
		if srv.Latency > 0 {
			sec = srv.Latency.Seconds() * r.work / e.w.Service.Seconds()
		}
		speed := srv.Speed
		if speed == 0 {
			speed = 1
		}
		service = time.Duration(sec * srv.factor(now) / speed * 1e9)
	}
	e.push(event{at: now + service, idx: idx})
}

func (s *Server) window(now time.Duration) (Window, bool) {
	for _, w := range s.Windows {
		if now >= w.From && now < w.To {
			return w, true
		}
	}
	return Window{}, false
}

func (w Window) latency() time.Duration {
	if w.Latency == 0 {
		return 10 * time.Millisecond
	}
	return w.Latency
}

func (w Window) status() int {
	if w.Status == 0 {
		return 503
	}
	return w.Status
}

// complete finishes the earliest request in service.
func (e *engine) complete() {
	ev := e.pop()
	e.clock.set(ev.at)
	r := &e.recs[ev.idx]
	s := int(r.server)
	srv := &e.servers[s]
	status := 200
	switch {
	case r.status != 0:
		status = int(r.status)
	case r.u < srv.ErrorRate:
		status = 500
	}
	tryLatency := ev.at - r.sent
	retry := r.flight.Done(proxy.Result{Outcome: health.Outcome{Status: status, Latency: tryLatency, At: e.clock.Now()}})
	ok := r.flight.Verdict() != health.Failure
	if e.hooks.Completed != nil {
		e.hooks.Completed(ev.at, s, ok, tryLatency)
	}
	e.busy[s]--
	if q := &e.queues[s]; q.size > 0 {
		e.start(q.pop())
	}
	if retry {
		e.res.Retries++
		r.u = e.retry.float() // another try fails or not on its own
		e.send(ev.idx)
		return
	}
	latency := ev.at - r.arrival // every try, queues included
	if ok {
		e.res.OK.Record(latency)
	} else {
		e.res.Failures++
	}
	e.res.Latency.Record(latency)
	e.free = append(e.free, ev.idx)
}

func (e *engine) push(ev event) {
	h := append(e.heap, ev)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= ev.at {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = ev
	e.heap = h
}

func (e *engine) pop() event {
	h := e.heap
	top := h[0]
	last := h[len(h)-1]
	h = h[:len(h)-1]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		if r := l + 1; r < len(h) && h[r].at < h[l].at {
			l = r
		}
		if last.at <= h[l].at {
			break
		}
		h[i] = h[l]
		i = l
	}
	if len(h) > 0 {
		h[i] = last
	}
	e.heap = h
	return top
}
