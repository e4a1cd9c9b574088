package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/internal/config"
)

// redactor holds the replacer of the secrets the running configuration
// read through config filters; it changes on reload.
type redactor struct {
	mu sync.RWMutex
	r  *strings.Replacer // nil: no secret
}

func (r *redactor) set(secrets []string) {
	var rep *strings.Replacer
	if len(secrets) > 0 {
		rep = config.Redactor(secrets)
	}
	r.mu.Lock()
	r.r = rep
	r.mu.Unlock()
}

func (r *redactor) get() *strings.Replacer {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.r
}

// redactHandler is the agent's log handler: it replaces every secret in a
// record's message and attributes before the real handler writes it, so a
// component that logs a value it was configured with (an error quoting a
// password, say) cannot leak one.
type redactHandler struct {
	h slog.Handler
	r *redactor
}

func (h *redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	rep := h.r.get()
	if rep == nil {
		return h.h.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, rep.Replace(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(rep, a))
		return true
	})
	return h.h.Handle(ctx, out)
}

// WithAttrs redacts the attributes with the secrets known now: component
// loggers are made after the configuration's secrets are.
func (h *redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if rep := h.r.get(); rep != nil {
		red := make([]slog.Attr, len(attrs))
		for i, a := range attrs {
			red[i] = redactAttr(rep, a)
		}
		attrs = red
	}
	return &redactHandler{h: h.h.WithAttrs(attrs), r: h.r}
}

func (h *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{h: h.h.WithGroup(name), r: h.r}
}

func redactAttr(rep *strings.Replacer, a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, rep.Replace(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = redactAttr(rep, ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		s := fmt.Sprint(v.Any())
		if r := rep.Replace(s); r != s {
			return slog.String(a.Key, r)
		}
	}
	return a
}
