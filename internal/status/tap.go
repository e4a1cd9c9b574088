package status

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/redact"
)

// Tap limits: the default and highest sample rates, and how many samples
// wait for a slow reader before more are dropped.
const (
	DefaultTapRate = 10
	MaxTapRate     = 10000
	tapBuffer      = 256
)

// TapLine is one line of /api/tap: a sampled event, or (Dropped > 0 and
// no event) a count of samples lost because the reader was slow.
type TapLine struct {
	Time      int64             `json:"time,omitempty"`     // Unix ms when sampled
	Received  int64             `json:"received,omitempty"` // Unix ms when the agent received it, if known
	Kind      string            `json:"kind,omitempty"`     // source or channel
	Component string            `json:"component,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	// Body is the body when it is UTF-8 text; BodyBase64 otherwise.
	Body       *string `json:"body,omitempty"`
	BodyBase64 string  `json:"body_base64,omitempty"`
	Dropped    int64   `json:"dropped,omitempty"`
}

// tapTarget finds the tap point kind of the component name in g: a source
// (its output) or a channel (its take). kind may be given to choose.
func tapTarget(g Graph, name, kind string) (string, error) {
	var kinds []string
	for _, s := range g.Sources {
		if s.Name == name {
			kinds = append(kinds, "source")
		}
	}
	for _, c := range g.Channels {
		if c.Name == name {
			kinds = append(kinds, "channel")
		}
	}
	if kind != "" {
		if kind != "source" && kind != "channel" {
			return "", fmt.Errorf("kind %q: a tap watches a source's output or a channel's take; use source or channel", kind)
		}
		for _, k := range kinds {
			if k == kind {
				return k, nil
			}
		}
		return "", fmt.Errorf("agent has no %s %q", kind, name)
	}
	switch len(kinds) {
	case 1:
		return kinds[0], nil
	case 2:
		return "", fmt.Errorf("%q is both a source and a channel; say which (kind=source or kind=channel)", name)
	}
	for _, k := range g.Sinks {
		if k.Name == name {
			return "", fmt.Errorf("%q is a sink; tap its channel %q to see what it takes", name, k.Channel)
		}
	}
	var names []string
	for _, s := range g.Sources {
		names = append(names, s.Name)
	}
	for _, c := range g.Channels {
		names = append(names, c.Name)
	}
	return "", fmt.Errorf("agent has no source or channel %q; it has %s", name, strings.Join(names, ", "))
}

func serveTap(w http.ResponseWriter, req *http.Request, cfg Config) {
	if !cfg.AllowTap || cfg.Taps == nil {
		http.Error(w, "tap is off: it shows event data, so the agent serves it only when started with --allow-tap", http.StatusForbidden)
		return
	}
	q := req.URL.Query()
	name := q.Get("component")
	if name == "" {
		http.Error(w, "component is required: the name of a source or a channel", http.StatusBadRequest)
		return
	}
	kind, err := tapTarget(cfg.Sampler.agent.Graph(), name, q.Get("kind"))
	if err != nil {
		code := http.StatusBadRequest
		if strings.HasPrefix(err.Error(), "agent has no") {
			code = http.StatusNotFound
		}
		http.Error(w, cfg.Redact.String(err.Error()), code)
		return
	}
	rate := float64(DefaultTapRate)
	if v := q.Get("rate"); v != "" {
		rate, err = strconv.ParseFloat(v, 64)
		if err != nil || !(rate > 0 && rate <= MaxTapRate) {
			http.Error(w, fmt.Sprintf("rate %q: want events a second above 0, at most %d", v, MaxTapRate), http.StatusBadRequest)
			return
		}
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
			http.Error(w, fmt.Sprintf("limit %q: want a number of events (0: no limit)", v), http.StatusBadRequest)
			return
		}
	}

	rc := http.NewResponseController(w)
	// A tap lasts as long as its reader wants, and may wait long for its
	// first event: lift the server's read deadline, and extend the write
	// deadline (the server's WriteTimeout would end the stream) write by
	// write.
	_ = rc.SetReadDeadline(time.Time{})
	r := cfg.Taps.Point(kind, name).Watch(rate, tapBuffer)
	defer r.Close()
	cfg.Log.Info("tap started", "kind", kind, "component", name, "rate", rate, "limit", limit, "remote", req.RemoteAddr)
	sent := 0
	defer func() {
		cfg.Log.Info("tap ended", "kind", kind, "component", name, "events", sent, "remote", req.RemoteAddr)
	}()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	enc := json.NewEncoder(w)
	write := func(l TapLine) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return enc.Encode(l) == nil
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-req.Context().Done():
			return
		case e := <-r.Events():
			if !write(tapLine(kind, name, e, cfg.Redact)) {
				return
			}
			sent++
			if limit > 0 && sent >= limit {
				_ = rc.Flush()
				return
			}
			if len(r.Events()) == 0 {
				_ = rc.Flush()
			}
		case <-tick.C:
			if d := r.Dropped(); d > 0 {
				if !write(TapLine{Dropped: d}) {
					return
				}
				_ = rc.Flush()
			}
		}
	}
}

// tapLine is the line of event e. The event's headers and body are masked
// as the agent's log masks a logged event: an interceptor or a sender may
// have put a secret the agent knows into them.
func tapLine(kind, name string, e event.Event, red *redact.Redactor) TapLine {
	l := TapLine{Time: time.Now().UnixMilli(), Kind: kind, Component: red.String(name)}
	if e.ReceivedAt != 0 {
		l.Received = e.ReceivedAt / 1e6
	}
	if e.Headers != nil {
		l.Headers = make(map[string]string, len(e.Headers))
		for k, v := range e.Headers.All() {
			l.Headers[red.String(k)] = red.String(v)
		}
	}
	body := red.Bytes(e.Body)
	if utf8.Valid(body) {
		s := string(body)
		l.Body = &s
	} else {
		l.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
	return l
}
