package agent

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/listener"
	"github.com/sluicehq/sluice/internal/metrics"
)

// The monitoring port's connection hygiene: a few operators' tools and
// scrapers, each request a short GET (the tap streams its answer, which is
// the agent's time, not the client's).
var monitorHygiene = listener.Config{
	MaxConns:        256,
	IdleTimeout:     60 * time.Second,
	ProgressTimeout: 5 * time.Second,
	MinRate:         listener.DefaultMinRate,
}

var reasonMonitorProtocol = listener.Reason{Counter: "ProtocolErrorCount", Level: slog.LevelWarn,
	Msg: "monitoring port: a connection failed at the HTTP or TLS level"}

// monitorServer is how the monitoring port listens and serves: through a
// listener.Group, as every listener of the agent, so that its failed TLS
// handshakes, slow requests and refused connections are counted
// (sluice_monitoring_*_total{component="http"}) and told throttled, never one
// line each. h is wrapped to mark a request's connection busy once the
// request has arrived.
func (a *Agent) monitorServer(h http.Handler) (http.Handler, metrics.ServeOptions) {
	set := metrics.NewSet(metrics.KindMonitoring, "http", "http")
	a.reg.AddOwn(set)
	const name = "monitoring"
	rejects := listener.NewRejects(name, a.log, set,
		slices.Concat(listener.ConnReasons, listener.TLSReasons, []listener.Reason{reasonMonitorProtocol})...)
	g := listener.NewGroup(monitorHygiene, listener.Options{Source: name, Log: a.log, Rejects: rejects,
		Open: set.Counter("OpenConnectionCount")})
	busy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := listener.ConnOf(r.Context()); c != nil {
			c.Busy() // a GET has arrived whole; the answer (a tap's stream) is the agent's time
		}
		h.ServeHTTP(w, r)
	})
	return busy, metrics.ServeOptions{
		TLS: a.opts.HTTPTLS,
		Log: a.log,
		Listen: func(_ context.Context, addr string) (net.Listener, error) {
			ln, err := g.Listen(addr)
			if err != nil {
				_ = g.Shutdown(context.Background())
			}
			return ln, err
		},
		Prepare: func(srv *http.Server) { listener.HTTP(srv, rejects, reasonMonitorProtocol) },
		Stopped: g.Shutdown,
	}
}
