package avrosink

import (
	"context"
	"net"
	"testing"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/testutil/sinktest"
)

// TestSinkSuite runs the sink contract against Flume's Avro RPC server
// (avrorpc, as the avro source serves it) whose handler answers FAILED
// while refusing, as a Flume source with a full channel does, and holds a
// call unanswered while stalled.
func TestSinkSuite(t *testing.T) {
	sinktest.RunSinkSuite(t, func(t *testing.T, env flow.Env) (flow.Sink, sinktest.Downstream) {
		h := &gateHandler{gate: sinktest.NewGate()}
		addr, _ := testutil.ServeConns(t, (&avrorpc.Server{Handler: h}).ServeConn)
		_, port, _ := net.SplitHostPort(addr)
		p := config.FromMap("a1.sinks.k1.", map[string]string{"hostname": "127.0.0.1", "port": port, "batch-size": "100",
			"connect-timeout": "2000", "request-timeout": "20000"})
		env.Type = "avro"
		k, err := New(env, p)
		if err != nil || p.Err() != nil {
			t.Fatal(err, p.Err())
		}
		return k, h.gate.Downstream(h.got.Get)
	})
}

// gateHandler takes the calls its gate admits and answers FAILED to the
// others.
type gateHandler struct {
	gate *sinktest.Gate
	got  sinktest.Bodies
}

func (h *gateHandler) Append(ctx context.Context, e event.Event) avrorpc.Status {
	return h.AppendBatch(ctx, []event.Event{e})
}

func (h *gateHandler) AppendBatch(ctx context.Context, events []event.Event) avrorpc.Status {
	if !h.gate.Admit(ctx) {
		return avrorpc.Failed
	}
	for _, e := range events {
		h.got.Add(string(e.Body))
	}
	return avrorpc.OK
}
