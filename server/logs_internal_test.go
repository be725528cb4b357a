package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-lb/rotor/internal/testtool"
)

// A logger derived before the format changes (With, WithGroup) writes
// the next record in the new format, with what it was given.
func TestLogsChangeFormat(t *testing.T) {
	var out bytes.Buffer
	level := new(slog.LevelVar)
	l := newLogs(&out, level, "text")
	root := l.logger()
	derived := root.With("listener", "web").WithGroup("req").With("id", 7)
	derived.Info("one", "k", "v")
	root.Debug("hidden")
	l.setFormat("json")
	derived.Info("two", "k", "v")
	level.Set(slog.LevelDebug)
	root.Debug("shown")
	l.setFormat("text")
	derived.Info("three", "k", "v")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), out.String())
	}
	for _, want := range []string{"msg=one listener=web req.id=7 req.k=v", "msg=three listener=web req.id=7 req.k=v"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no text line with %q:\n%s", want, out.String())
		}
	}
	var two struct {
		Msg      string
		Listener string
		Req      struct {
			ID int
			K  string
		}
	}
	if err := json.Unmarshal([]byte(lines[1]), &two); err != nil || two.Msg != "two" || two.Listener != "web" || two.Req.ID != 7 || two.Req.K != "v" {
		t.Fatalf("the line after the switch to json: %q (%v)", lines[1], err)
	}
	if !json.Valid([]byte(lines[2])) || !strings.Contains(lines[2], `"msg":"shown"`) {
		t.Fatalf("debug, once the level allows it, in json: %q", lines[2])
	}
}

// Loggers write while the format changes under them.
func TestLogsChangeFormatWhileWriting(t *testing.T) {
	out := &testtool.Buffer{}
	l := newLogs(out, new(slog.LevelVar), "text")
	log := l.logger().With("a", 1)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				log.Info("x")
			}
		})
	}
	for i := range 50 {
		l.setFormat([]string{"json", "text"}[i%2])
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, line := range lines {
		if !strings.Contains(line, `"a":1`) && !strings.Contains(line, "a=1") {
			t.Fatalf("a line lost its attribute: %q", line)
		}
	}
}

// The switch's cost on a logged line: the access log's, a line with a
// request's attributes, against the format's handler alone.
func BenchmarkLogLine(b *testing.B) {
	level := new(slog.LevelVar)
	for _, tc := range []struct {
		name string
		log  *slog.Logger
	}{
		{"json", slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: level}))},
		{"switch/json", newLogs(io.Discard, level, "json").logger()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			log := tc.log.With("listener", "web")
			b.ReportAllocs()
			for b.Loop() {
				log.LogAttrs(context.Background(), slog.LevelInfo, "request", slog.String("pool", "app"), slog.Int("status", 200), slog.Duration("took", time.Millisecond))
			}
		})
	}
}
