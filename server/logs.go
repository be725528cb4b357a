package server

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
)

// logs is where every part's logger writes: the handler of the format in
// force (log.format), which a reload swaps. Each part was given a logger
// at start, often with attributes of its own (With); the loggers it
// derived write through a switchHandler, which builds its attributes and
// groups on the handler in force once and again only after a swap.
type logs struct {
	out   io.Writer
	level *slog.LevelVar
	cur   atomic.Pointer[logFormat]
}

// logFormat is one format's handler, new with each swap.
type logFormat struct {
	name string
	h    slog.Handler
}

func newLogs(out io.Writer, level *slog.LevelVar, format string) *logs {
	l := &logs{out: out, level: level}
	l.setFormat(format)
	return l
}

// setFormat makes every logger write in format ("json" or "text") from
// the next record on.
func (l *logs) setFormat(format string) {
	if f := l.cur.Load(); f != nil && f.name == format {
		return
	}
	opts := &slog.HandlerOptions{Level: l.level}
	var h slog.Handler = slog.NewTextHandler(l.out, opts)
	if format == "json" {
		h = slog.NewJSONHandler(l.out, opts)
	}
	l.cur.Store(&logFormat{name: format, h: h})
}

func (l *logs) logger() *slog.Logger { return slog.New(&switchHandler{logs: l}) }

// switchHandler is a logger's handler: the one in force, with the
// attributes and groups the logger was given (With, WithGroup), each a
// link to its parent.
type switchHandler struct {
	logs   *logs
	parent *switchHandler // nil: the root, with nothing added
	attrs  []slog.Attr
	group  string
	built  atomic.Pointer[builtHandler]
}

// builtHandler is a switchHandler built on one format's handler.
type builtHandler struct {
	on *logFormat
	h  slog.Handler
}

// on is h built on f's handler, kept until the format changes.
func (h *switchHandler) on(f *logFormat) slog.Handler {
	if b := h.built.Load(); b != nil && b.on == f {
		return b.h
	}
	var out slog.Handler
	switch {
	case h.parent == nil:
		out = f.h
	case h.group != "":
		out = h.parent.on(f).WithGroup(h.group)
	default:
		out = h.parent.on(f).WithAttrs(h.attrs)
	}
	h.built.Store(&builtHandler{on: f, h: out})
	return out
}

func (h *switchHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.logs.level.Level()
}

func (h *switchHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.on(h.logs.cur.Load()).Handle(ctx, r)
}

func (h *switchHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return &switchHandler{logs: h.logs, parent: h, attrs: slices.Clone(attrs)}
}

func (h *switchHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &switchHandler{logs: h.logs, parent: h, group: name}
}
