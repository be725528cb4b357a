package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rotor-lb/rotor/config"
	"github.com/rotor-lb/rotor/internal/webui"
	"github.com/rotor-lb/rotor/placement"
	"github.com/rotor-lb/rotor/sim"
)

// The bounds of what the page may ask: enough for every lesson, small
// enough that no request costs more than a fraction of a second.
const (
	webMaxNodes    = 32
	webMaxVNodes   = 500
	webMaxKeys     = 100_000
	webMaxRequests = 100_000
	webMaxKey      = 256
	webDots        = 240 // keys drawn on the clock face and in each strip
)

func newWebCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "web",
		Short: "Serve the page where the ring and the policies can be played with",
		Long: `Serve article 000's "See it" as a page: a ring of servers with their
virtual-node points and the keys each owns, a virtual-node slider, servers
to add and remove with the keys each change moved (beside hash % N), a
lookup that shows the walk to a key's owner, and one card per balancing
policy on the same request stream.

Every figure on the page is computed by rotor's own code (the placers,
the policies, the simulator) and fetched as JSON from /api/; each card and
strip shows the rotor command that prints the same numbers.`,
		Example: "  rotor web\n  rotor web --listen 127.0.0.1:8088",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkHostPort("--listen", listen); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			srv := &http.Server{Handler: newWebHandler(), ReadHeaderTimeout: 10 * time.Second,
				ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
			// Taken before the address is printed: a signal sent as soon
			// as it is stops the server gracefully.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "rotor web: serving http://%s/ (Ctrl-C stops)\n", ln.Addr())
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to serve on; port 0 takes a free one")
	return cmd
}

// checkHostPort refuses an address net.Listen would misread.
func checkHostPort(flag, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s: %q is not HOST:PORT (%v)", flag, addr, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s: %q: the port must be a number from 0 to 65535", flag, addr)
	}
	return nil
}

// newWebHandler is the page, its assets and the JSON API. At most two API
// computations run at once (the machine's cores); the others wait.
func newWebHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", webui.Page("lesson.html"))
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", webui.Assets()))
	slots := make(chan struct{}, 2)
	api := func(pattern string, f func(q webQuery) (any, error)) {
		mux.HandleFunc("GET "+pattern, func(w http.ResponseWriter, r *http.Request) {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-r.Context().Done():
				return
			}
			v, err := f(webQuery{r.URL.Query()})
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				v = map[string]string{"error": err.Error()}
			}
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	api("/api/ring", webRing)
	api("/api/moves", webMoves)
	api("/api/place", webPlace)
	api("/api/balance", webBalance)
	return mux
}

// webQuery reads the API's parameters with the CLI's rules, naming the
// parameter in every error.
type webQuery struct{ v map[string][]string }

func (q webQuery) str(name, def string) string {
	if vs := q.v[name]; len(vs) > 0 {
		return vs[0]
	}
	return def
}

func (q webQuery) int(name string, def, lo, hi int) (int, error) {
	s := q.str(name, "")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s: must be a whole number from %d to %d (got %q)", name, lo, hi, s)
	}
	return n, nil
}

func (q webQuery) bool(name string) bool {
	s := q.str(name, "")
	return s == "1" || s == "true" || s == "on"
}

// placer reads algo, vnodes and hash into the flags `rotor place` and
// `rotor moves` take, so that the page and the commands build the same
// placer, and returns the command-line flags that say so.
func (q webQuery) placer() (placerFlags, placement.Hash, []string, error) {
	f := placerFlags{algo: q.str("algo", "ring"), vnodes: placement.DefaultVNodes, hash: q.str("hash", "xxhash"),
		epsilon: placement.DefaultEpsilon, tableSize: placement.DefaultTableSize}
	var err error
	if f.vnodes, err = q.int("vnodes", placement.DefaultVNodes, 1, webMaxVNodes); err != nil {
		return f, 0, nil, err
	}
	if !slices.Contains(algorithms, f.algo) {
		return f, 0, nil, fmt.Errorf("algo: %q is not an algorithm (%s)", f.algo, strings.Join(algorithms, ", "))
	}
	_, h, err := f.validate(false)
	if err != nil {
		return f, 0, nil, err
	}
	args := []string{"--algo", f.algo}
	if f.algo == "ring" || f.algo == "bounded" {
		args = append(args, "--vnodes", strconv.Itoa(f.vnodes))
	}
	if f.hash != "xxhash" {
		args = append(args, "--hash", f.hash)
	}
	return f, h, args, nil
}

func (q webQuery) nodes(name string) ([]placement.Node, error) {
	nodes, err := parseNodes(name, q.str(name, ""))
	if err == nil && len(nodes) > webMaxNodes {
		err = fmt.Errorf("%s: at most %d nodes on the page (got %d)", name, webMaxNodes, len(nodes))
	}
	return nodes, err
}

// keyDot is one key drawn on the clock face: where its hash falls, and
// the node that owns it.
type keyDot struct {
	Key  string  `json:"key"`
	At   float64 `json:"at"`
	Node string  `json:"node"`
}

// owned is one node's bar: the keys it owns of the sample, and its exact
// share of the key space where the placer has one.
type owned struct {
	Node  string   `json:"node"`
	Keys  int      `json:"keys"`
	Space *float64 `json:"space,omitempty"`
}

type ringDoc struct {
	Algo string `json:"algo"`
	// Circle says whether the placer owns arcs of a circle (ring,
	// bounded): Points are then its points, and a key's owner is the
	// first point clockwise past it.
	Circle bool              `json:"circle"`
	Points []placement.Point `json:"points,omitempty"`
	Dots   []keyDot          `json:"dots"`
	Keys   int               `json:"keys"`
	Owned  []owned           `json:"owned"`
	Spread *spread           `json:"spread"`
}

// webRing is the clock face: the points, the first keys where their hash
// falls and whose they are, and the keys each node owns of the sample.
func webRing(q webQuery) (any, error) {
	f, h, _, err := q.placer()
	if err != nil {
		return nil, err
	}
	nodes, err := q.nodes("nodes")
	if err != nil {
		return nil, err
	}
	n, err := q.int("keys", 10_000, webDots, webMaxKeys)
	if err != nil {
		return nil, err
	}
	p, err := f.newPlacer(f.algo, h, nodes, "nodes")
	if err != nil {
		return nil, err
	}
	keys := placement.Keys(n)
	owners, err := placement.Assign(p, keys)
	if err != nil {
		return nil, err
	}
	doc := ringDoc{Algo: f.algo, Keys: n}
	if c, ok := p.(interface{ Circle() []placement.Point }); ok {
		doc.Circle, doc.Points = true, c.Circle()
	}
	for i, k := range keys[:webDots] {
		doc.Dots = append(doc.Dots, keyDot{Key: k, At: h.Turn(h.Sum(k)), Node: owners[i]})
	}
	sp := placement.SpreadOf(nodes, owners)
	doc.Spread = spreadOf(sp)
	var shares []float64
	if ks, ok := p.(placement.KeySpacer); ok {
		shares = ks.KeySpace()
	}
	for i, nd := range nodes {
		o := owned{Node: nd.Name, Keys: sp.Keys[nd.Name]}
		if shares != nil {
			o.Space = &shares[i]
		}
		doc.Owned = append(doc.Owned, o)
	}
	return doc, nil
}

type movesDoc struct {
	// Rows are the chosen algorithm's and, beside it, hash % N's: what
	// `rotor moves --json` prints for each, with the command.
	Rows []movesStrip `json:"rows"`
}

type movesStrip struct {
	movesRow
	// Strip is the first keys, one character each: 1 moved, 0 stayed.
	Strip   string `json:"strip"`
	Command string `json:"command"`
}

// webMoves measures a change of membership as `rotor moves` does, for the
// algorithm and for hash % N, with a strip of which keys moved.
func webMoves(q webQuery) (any, error) {
	f, h, flags, err := q.placer()
	if err != nil {
		return nil, err
	}
	before, err := q.nodes("from")
	if err != nil {
		return nil, err
	}
	after, err := q.nodes("to")
	if err != nil {
		return nil, err
	}
	n, err := q.int("keys", 10_000, webDots, webMaxKeys)
	if err != nil {
		return nil, err
	}
	keys := placement.Keys(n)
	var doc movesDoc
	for _, algo := range []string{f.algo, "modn"} {
		if algo == "modn" && f.algo == "modn" {
			break
		}
		c, err := f.change(algo, h, before, after, keys, "keys")
		if err != nil {
			return nil, err
		}
		strip := make([]byte, webDots)
		for i := range strip {
			strip[i] = '0'
			if c.ownersBefore[i] != c.ownersAfter[i] {
				strip[i] = '1'
			}
		}
		args := flags
		if algo == "modn" {
			args = []string{"--algo", "modn"}
			if f.hash != "xxhash" {
				args = append(args, "--hash", f.hash)
			}
		}
		args = append(slices.Clone(args), "--from", nodeSpec(before), "--to", nodeSpec(after), "--keys", strconv.Itoa(n), "--json")
		doc.Rows = append(doc.Rows, movesStrip{movesRow: c.row, Strip: string(strip), Command: command("moves", args...)})
	}
	return doc, nil
}

type placeDoc struct {
	Owner   string    `json:"owner"`
	Key     string    `json:"key"`
	KeyAt   float64   `json:"key_at"`
	Steps   []webStep `json:"steps"`
	Command string    `json:"command"`
}

type webStep struct {
	placement.Step
	// At is where on the circle the step's point lies, for placers that
	// walk one (ring, bounded).
	At *float64 `json:"at,omitempty"`
}

// webPlace is the lookup box: the owner `rotor place` gives, and the
// walk `rotor place --explain` prints.
func webPlace(q webQuery) (any, error) {
	f, h, flags, err := q.placer()
	if err != nil {
		return nil, err
	}
	nodes, err := q.nodes("nodes")
	if err != nil {
		return nil, err
	}
	key := q.str("key", "")
	if key == "" || len(key) > webMaxKey || strings.ContainsAny(key, "\r\n") {
		return nil, fmt.Errorf("key: must be one line of 1 to %d bytes", webMaxKey)
	}
	p, err := f.newPlacer(f.algo, h, nodes, "nodes")
	if err != nil {
		return nil, err
	}
	e, err := p.(placement.Explainer).Explain(key, 1)
	if err != nil {
		return nil, err
	}
	doc := placeDoc{Owner: e.Owners[0], Key: key, KeyAt: h.Turn(e.KeyHash),
		Command: command("place", append(slices.Clone(flags), "--nodes", nodeSpec(nodes), "--", key)...)}
	if a, ok := p.(placement.Acquirer); ok { // bounded: a key alone owns nothing yet
		if doc.Owner, err = a.Acquire(key); err != nil {
			return nil, err
		}
	}
	_, circle := p.(interface{ Circle() []placement.Point })
	for _, s := range e.Steps {
		ws := webStep{Step: s}
		if circle && s.Label != "" {
			at := h.Turn(s.Hash)
			ws.At = &at
		}
		doc.Steps = append(doc.Steps, ws)
	}
	return doc, nil
}

type balanceDoc struct {
	sim.BalanceReport
	// Commands print each result alone: every policy sees the same
	// request stream, so a policy's numbers do not depend on the others
	// run beside it.
	Commands map[string]string `json:"commands"`
}

// webBalance runs the balancing cards: `rotor sim balance` itself, with
// the page's ticks as its flags, in this process.
func webBalance(q webQuery) (any, error) {
	policies := config.PolicyNames
	if s := q.str("policies", ""); s != "" {
		policies = strings.Split(s, ",")
	}
	if len(policies) > len(config.PolicyNames) {
		return nil, fmt.Errorf("policies: at most %d", len(config.PolicyNames))
	}
	requests, err := q.int("requests", 20_000, 1_000, webMaxRequests)
	if err != nil {
		return nil, err
	}
	seed, err := q.int("seed", 1, 0, 1<<31-1)
	if err != nil {
		return nil, err
	}
	var cond []string
	if q.bool("slow") {
		cond = append(cond, "--slow", "0=3")
	}
	if q.bool("hot") {
		cond = append(cond, "--hot", "0.45")
	}
	tail := append(cond, "--requests", strconv.Itoa(requests), "--seed", strconv.Itoa(seed), "--json")
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs(append([]string{"sim", "balance", "--policies", strings.Join(policies, ",")}, tail...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	if err := root.Execute(); err != nil {
		return nil, err
	}
	doc := balanceDoc{Commands: map[string]string{}}
	if err := json.Unmarshal(out.Bytes(), &doc.BalanceReport); err != nil {
		return nil, errors.New("the simulation printed no report")
	}
	for _, p := range policies {
		doc.Commands[p] = command("sim", append([]string{"balance", "--policies", p}, tail...)...)
	}
	return doc, nil
}

// nodeSpec writes nodes back as a --nodes value.
func nodeSpec(nodes []placement.Node) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = n.Name
		if n.Weight > 1 {
			parts[i] += "=" + strconv.Itoa(n.Weight)
		}
	}
	return strings.Join(parts, ",")
}

// command is the rotor command line that prints the same figures, quoted
// for a POSIX shell.
func command(sub string, args ...string) string {
	words := []string{"rotor", sub}
	for _, a := range args {
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.,:=/@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
