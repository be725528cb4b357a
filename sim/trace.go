package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseTrace reads a trace: one request a line, "time,key,cost", time in
// seconds from the start (non-decreasing), cost a positive number (empty
// means 1). Blank lines and lines starting with # are skipped. Errors name
// the line.
func ParseTrace(r io.Reader) ([]TraceEntry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var out []TraceEntry
	var last time.Duration
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Split(text, ",")
		if len(fields) != 3 {
			return nil, fmt.Errorf("line %d: want time,key,cost (got %d fields)", line, len(fields))
		}
		sec, err := strconv.ParseFloat(strings.TrimSpace(fields[0]), 64)
		if err != nil || sec < 0 || math.IsInf(sec, 0) || math.IsNaN(sec) || sec > 1e9 {
			return nil, fmt.Errorf("line %d: time %q is not a number of seconds >= 0", line, fields[0])
		}
		at := time.Duration(sec * 1e9)
		if at < last {
			return nil, fmt.Errorf("line %d: time %v goes back before %v", line, at, last)
		}
		last = at
		cost := 1.0
		if c := strings.TrimSpace(fields[2]); c != "" {
			cost, err = strconv.ParseFloat(c, 64)
			if err != nil || !(cost > 0) || math.IsInf(cost, 0) {
				return nil, fmt.Errorf("line %d: cost %q is not a positive number", line, fields[2])
			}
		}
		out = append(out, TraceEntry{At: at, Key: strings.TrimSpace(fields[1]), Cost: cost})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no requests in the trace")
	}
	return out, nil
}
