// Package redact keeps secrets out of what the agent says. The agent owns
// one Redactor holding every secret it knows: the values its configuration
// read through config filters, the passwords of URLs in it (user:password@),
// and the credentials of its command line (--conf-user, --conf-password,
// the monitoring password, -D...password properties). Every text that
// leaves the process passes it: log records (Handler), the monitoring
// endpoints (/healthz, /metrics, /metrics/prometheus label values,
// /api/status, the tap's events), and what the command line prints
// (validate's problem lines, the error an exit prints).
//
// A component never needs to know which of its values are secret: whatever
// it puts in an error, a health reason or a log attribute is masked on the
// way out, also inside a longer text (a URL's query, a quoted value).
package redact

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Mask is what a secret is replaced with.
const Mask = "<secret>"

// MinLen is the shortest secret replaced: masking every "1" or "a" would
// garble messages more than it protects.
const MinLen = 3

// Redactor replaces the secrets it holds with Mask. The set can change
// while it is used (a reload reads new secrets). A nil or zero Redactor
// replaces nothing. It is safe for concurrent use.
type Redactor struct {
	rep atomic.Pointer[strings.Replacer] // nil: no secret
}

// New returns a Redactor of secrets.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Set(secrets)
	return r
}

// Set replaces the secrets r masks with secrets.
func (r *Redactor) Set(secrets []string) { r.rep.Store(Replacer(secrets)) }

func (r *Redactor) replacer() *strings.Replacer {
	if r == nil {
		return nil
	}
	return r.rep.Load()
}

// String returns s with every secret masked.
func (r *Redactor) String(s string) string {
	if rep := r.replacer(); rep != nil {
		return rep.Replace(s)
	}
	return s
}

// Bytes returns b with every secret masked: b itself when it holds none.
func (r *Redactor) Bytes(b []byte) []byte {
	rep := r.replacer()
	if rep == nil {
		return b
	}
	if s := rep.Replace(string(b)); s != string(b) {
		return []byte(s)
	}
	return b
}

// Error returns an error whose text is err's with every secret masked; it
// unwraps to err, so errors.Is and errors.As still see the cause. nil stays
// nil.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	if s := r.String(err.Error()); s != err.Error() {
		return &redacted{msg: s, err: err}
	}
	return err
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// Replacer returns a replacer of every secret of at least MinLen bytes, and
// of the forms a secret takes when a message escapes it (quoted with %q,
// escaped in a URL's query or path, or in a JSON string), with Mask; nil when there is none.
// Longer secrets are replaced first, so a secret that contains another is
// masked whole.
func Replacer(secrets []string) *strings.Replacer {
	var forms []string
	seen := map[string]bool{}
	for _, s := range secrets {
		if len(s) < MinLen {
			continue
		}
		j, _ := json.Marshal(s)
		for _, f := range []string{s, unquoted(strconv.Quote(s)), unquoted(string(j)), url.QueryEscape(s), url.PathEscape(s)} {
			if !seen[f] {
				seen[f] = true
				forms = append(forms, f)
			}
		}
	}
	if len(forms) == 0 {
		return nil
	}
	// strings.Replacer tries its pairs in order at each position: longest
	// first masks "abc-secret" whole when "secret" is a secret too.
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Mask)
	}
	return strings.NewReplacer(pairs...)
}

func unquoted(q string) string { return q[1 : len(q)-1] }

// URLPasswords returns the passwords of the URLs in s written with user
// information (scheme://user:password@host): a password is a secret
// wherever it is written, in the configuration or on the command line.
func URLPasswords(s string) []string {
	var out []string
	for rest := s; ; {
		i := strings.Index(rest, "://")
		if i < 0 {
			return out
		}
		rest = rest[i+3:]
		// The authority ends at the first '/', '?', '#' or white space;
		// the user information at its last '@'.
		end := strings.IndexAny(rest, "/?# \t\"'")
		if end < 0 {
			end = len(rest)
		}
		auth := rest[:end]
		at := strings.LastIndexByte(auth, '@')
		if at < 0 {
			continue
		}
		_, pw, ok := strings.Cut(auth[:at], ":")
		if !ok || pw == "" {
			continue
		}
		out = append(out, pw)
		if dec, err := url.PathUnescape(pw); err == nil && dec != pw {
			out = append(out, dec) // what a client sends, and may print
		}
	}
}

// Handler returns a log handler that masks every secret r holds in a
// record's message and attributes (groups, errors and other values
// included) before h writes it, so that a component logging a value it was
// configured with cannot leak one.
func (r *Redactor) Handler(h slog.Handler) slog.Handler { return &handler{h: h, r: r} }

type handler struct {
	h slog.Handler
	r *Redactor
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	rep := h.r.replacer()
	if rep == nil {
		return h.h.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, rep.Replace(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(rep, a))
		return true
	})
	return h.h.Handle(ctx, out)
}

// WithAttrs masks the attributes with the secrets known now: component
// loggers are made after the configuration's secrets are read.
func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if rep := h.r.replacer(); rep != nil {
		red := make([]slog.Attr, len(attrs))
		for i, a := range attrs {
			red[i] = attr(rep, a)
		}
		attrs = red
	}
	return &handler{h: h.h.WithAttrs(attrs), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{h: h.h.WithGroup(name), r: h.r}
}

func attr(rep *strings.Replacer, a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, rep.Replace(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = attr(rep, ga)
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
