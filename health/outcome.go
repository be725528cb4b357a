package health

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrorKind says how a request failed before, or instead of, a status.
type ErrorKind uint8

const (
	// NoError: the endpoint answered; its Status says how.
	NoError ErrorKind = iota
	// ConnectError: the endpoint could not be reached (refused, unreachable).
	ConnectError
	// Timeout: the endpoint did not answer in time.
	Timeout
	// Broken: the connection broke, or the answer was malformed, mid-way.
	Broken
	// Blocked: the endpoint answered, but the answer says the request was
	// blocked (a route's "access denied" page, matched by a body pattern).
	Blocked
	// Canceled: the client went away first. Never the endpoint's fault.
	Canceled
	// Local: rotor refused or cut the request itself (its own overload, a
	// limit of its own). Never the endpoint's fault.
	Local
	// Client: the client sent something wrong (a malformed or unfinished
	// body, framing rotor refuses). Never the endpoint's fault.
	Client
)

var errorKindNames = [...]string{"none", "connect", "timeout", "broken", "blocked", "canceled", "local", "client"}

// String returns the kind's name as metrics and logs show it.
func (k ErrorKind) String() string {
	if int(k) < len(errorKindNames) {
		return errorKindNames[k]
	}
	return "ErrorKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is what happened to one request on one endpoint. Every policy and
// the health model learn only from outcomes.
type Outcome struct {
	// Status is the HTTP status, or 0 when there was none (a TCP
	// connection, or an error before any answer).
	Status int
	// Err is how the request failed, NoError when it did not.
	Err ErrorKind
	// Latency is the time the endpoint took: to the response headers for
	// HTTP; to establish the connection (dial, and the route's handshake)
	// for TCP and CONNECT tunnels. What happens later on a long connection
	// is not latency.
	Latency time.Duration
	// At is when the outcome was known. A caller that has just read the
	// clock to measure Latency passes it here and spares Done reading it
	// again; zero means Done asks the pool's clock.
	At time.Time
}

// Verdict is what an outcome means for the endpoint's health.
type Verdict int8

const (
	// Success counts for the endpoint.
	Success Verdict = iota
	// Failure counts against it.
	Failure
	// Ignore counts neither way: the client cancelled or erred, or rotor
	// itself refused the request.
	Ignore
)

func (v Verdict) String() string {
	switch v {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignore:
		return "ignore"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Classifier decides which outcomes are failures. Connection errors,
// timeouts, broken answers and blocked answers always are; cancellations,
// the client's own errors and rotor's own refusals never are; a status is
// a failure when it is in the classifier's set.
type Classifier struct {
	fail [10]uint64 // bit s set: status s (0..639) is a failure
	spec string     // as given, for display
}

// DefaultStatuses are the statuses that count as an endpoint failure for a
// backend server: every 5xx and 429 Too Many Requests.
const DefaultStatuses = "5xx,429"

// RouteStatuses are those for a forward-proxy route, where 403 and 407 mean
// the route was refused rather than that the target said no.
const RouteStatuses = "5xx,429,403,407"

// NewClassifier builds a classifier from a comma-separated list of statuses
// and classes: "5xx,429,403". An empty spec means DefaultStatuses.
func NewClassifier(spec string) (*Classifier, error) {
	if strings.TrimSpace(spec) == "" {
		spec = DefaultStatuses
	}
	c := &Classifier{spec: spec}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(strings.ToLower(item))
		if len(item) == 3 && item[1:] == "xx" && item[0] >= '1' && item[0] <= '5' {
			base := int(item[0]-'0') * 100
			for s := base; s < base+100; s++ {
				c.set(s)
			}
			continue
		}
		s, err := strconv.Atoi(item)
		if err != nil || s < 100 || s > 599 {
			return nil, fmt.Errorf("%q is not a status (100..599) or a class (1xx..5xx)", item)
		}
		c.set(s)
	}
	return c, nil
}

// MustClassifier is NewClassifier for specs known to be valid, such as the
// package's constants. It panics on a bad spec: never call it on outside input.
func MustClassifier(spec string) *Classifier {
	c, err := NewClassifier(spec)
	if err != nil {
		panic(err)
	}
	return c
}

func (c *Classifier) set(s int) { c.fail[s/64] |= 1 << (s % 64) }

// FailsOn reports whether status counts as a failure.
func (c *Classifier) FailsOn(status int) bool {
	return status >= 0 && status < 640 && c.fail[status/64]&(1<<(status%64)) != 0
}

// Classify returns the verdict on an outcome.
func (c *Classifier) Classify(o Outcome) Verdict { return c.Judge(o.Status, o.Err) }

// Judge returns the verdict on an outcome of that status and error: what
// Classify says, for a caller that has them at hand. (An Outcome is too
// large to be kept in registers: handed on whole, even to an inlined
// call, it is copied through memory.)
func (c *Classifier) Judge(status int, err ErrorKind) Verdict {
	switch err {
	case Canceled, Local, Client:
		return Ignore
	case ConnectError, Timeout, Broken, Blocked:
		return Failure
	}
	if c.FailsOn(status) {
		return Failure
	}
	return Success
}

// String returns the spec the classifier was built from.
func (c *Classifier) String() string { return c.spec }
