package status

import (
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/flow"
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
			snap := cfg.Sampler.Snapshot()
			snap.Tap = cfg.AllowTap
			writeJSON(w, snap)
		case p == "/api/history":
			h, ok := cfg.Sampler.History(req.URL.Query().Get("id"))
			if !ok {
				http.Error(w, "no such node; ids are kind/name as /api/status lists them", http.StatusNotFound)
				return
			}
			writeJSON(w, h)
		case p == "/api/tap":
			serveTap(w, req, cfg)
		default:
			cfg.Next.ServeHTTP(w, req)
		}
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
