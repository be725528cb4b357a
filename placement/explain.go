package placement

import (
	"fmt"
	"io"
	"strconv"
)

// Explainer is implemented by placers that can show how they placed a key:
// article 000's "type a key to see the clockwise walk", for every algorithm.
type Explainer interface {
	Explain(key string, r int) (Explanation, error)
}

// Explanation is the worked placement of one key.
type Explanation struct {
	Algo    string
	Key     string
	Hash    Hash
	KeyHash uint64
	// Steps are what the placer looked at, in order.
	Steps []Step
	// Owners is the result: the owner first, then replicas.
	Owners []string
}

// Step is one thing a placer looked at while placing a key: a ring point, a
// node's score, a jump, a table slot.
type Step struct {
	Label string  `json:"label,omitempty"` // what was looked at, e.g. "b#17" or "slot 4411"
	Hash  uint64  `json:"hash,omitempty"`  // its hash or position, when it has one
	Score float64 `json:"score,omitempty"` // its score, for placers that score (rendezvous)
	Node  string  `json:"node,omitempty"`  // the node it belongs to
	Note  string  `json:"note,omitempty"`  // what the walk made of it
}

// WriteTo prints the explanation for people, one step a line.
func (e Explanation) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	fmt.Fprintf(cw, "key %q (%s)  hash %s\n", e.Key, e.Hash, e.formatHash(e.KeyHash))
	for _, s := range e.Steps {
		switch {
		case s.Label == "" && s.Node == "":
			fmt.Fprintf(cw, "  %s\n", s.Note)
		case s.Score != 0:
			fmt.Fprintf(cw, "  %-14s score %-12.6g node %-10s %s\n", s.Label, s.Score, s.Node, s.Note)
		default:
			fmt.Fprintf(cw, "  %-14s %-20s node %-10s %s\n", s.Label, e.formatHash(s.Hash), s.Node, s.Note)
		}
	}
	fmt.Fprintf(cw, "owners: %v\n", e.Owners)
	return cw.n, cw.err
}

func (e Explanation) formatHash(h uint64) string {
	if e.Hash == MD5 {
		return fmt.Sprintf("%010d", h)
	}
	return fmt.Sprintf("%020d", h)
}

func ordinalNote(n int) string {
	if n == 1 {
		return "owner"
	}
	return "replica " + strconv.Itoa(n)
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}
