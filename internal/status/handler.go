package status

import (
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/redact"
)

//go:embed web
var webFiles embed.FS

// Config is what Handler serves.
type Config struct {
	Sampler *Sampler
	// Taps are the agent's tap points; AllowTap says whether /api/tap may
	// serve them (the agent's --allow-tap).
	Taps     *flow.Taps
	AllowTap bool
	Log      *slog.Logger
	// Redact masks the agent's secrets in every answer: the status (a
	// reason quoting a component's error), the graph, and the tap's events
	// and error messages.
	Redact *redact.Redactor
	// Next serves every other path (the metrics endpoints).
	Next http.Handler
}

// Handler serves the status page and its data, and passes other paths to
// cfg.Next:
//
//	/                  the status page (and /ui/... its script and style)
//	/api/status        the graph with live numbers (Snapshot), as JSON
//	/api/history?id=   one node's history (History), as JSON
//	/api/tap?component=NAME[&kind=source|channel][&rate=N][&limit=N]
//	                   events passing a source's output or a channel's take,
//	                   as JSON lines; only with AllowTap
//
// TRACE and OPTIONS are 403 everywhere, as Flume's monitoring answers.
func Handler(cfg Config) http.Handler {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Next == nil {
		cfg.Next = http.NotFoundHandler()
	}
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic("BUG: status: embedded web files: " + err.Error())
	}
	static := http.StripPrefix("/ui/", http.FileServerFS(sub))
	page, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic("BUG: status: embedded index.html: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodTrace || req.Method == http.MethodOptions {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		p := req.URL.Path
		switch {
		case p == "/":
			w.Header().Set("Content-Type", "text/html;charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = w.Write(page)
		case strings.HasPrefix(p, "/ui/") && p != "/ui/":
			w.Header().Set("Cache-Control", "no-cache")
			static.ServeHTTP(w, req)
		case p == "/api/status":
			snap := cfg.Sampler.Snapshot().redacted(cfg.Redact)
			snap.Tap = cfg.AllowTap
			writeJSON(w, snap)
		case p == "/api/history":
			h, ok := cfg.Sampler.History(req.URL.Query().Get("id"))
			if !ok {
				http.Error(w, "no such node; ids are kind/name as /api/status lists them", http.StatusNotFound)
				return
			}
			h.ID = cfg.Redact.String(h.ID)
			writeJSON(w, h)
		case p == "/api/tap":
			serveTap(w, req, cfg)
		default:
			cfg.Next.ServeHTTP(w, req)
		}
	})
}

// redacted returns s with every secret red holds masked in its texts. The
// node IDs are masked as the edges' ends are, so the graph still joins.
func (s Snapshot) redacted(red *redact.Redactor) Snapshot {
	str := red.String
	s.Agent = str(s.Agent)
	probs := make([]string, len(s.Problems))
	for i, p := range s.Problems {
		probs[i] = str(p)
	}
	s.Problems = probs
	notes := make([]string, len(s.Notes))
	for i, n := range s.Notes {
		notes[i] = str(n)
	}
	s.Notes = notes
	nodes := make([]Node, len(s.Nodes))
	for i, n := range s.Nodes {
		n.ID, n.Name, n.Type, n.Reason, n.Detail = str(n.ID), str(n.Name), str(n.Type), str(n.Reason), str(n.Detail)
		n.Note = str(n.Note)
		if n.Interceptors != nil {
			ics := make([]Named, len(n.Interceptors))
			for j, ic := range n.Interceptors {
				ics[j] = Named{Name: str(ic.Name), Type: str(ic.Type)}
			}
			n.Interceptors = ics
		}
		if n.Counters != nil {
			cs := make(map[string]string, len(n.Counters))
			for k, v := range n.Counters {
				cs[k] = str(v)
			}
			n.Counters = cs
		}
		nodes[i] = n
	}
	s.Nodes = nodes
	edges := make([]Edge, len(s.Edges))
	for i, e := range s.Edges {
		edges[i] = Edge{From: str(e.From), To: str(e.To), Label: str(e.Label), Optional: e.Optional}
	}
	s.Edges = edges
	return s
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
