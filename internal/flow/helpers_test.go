package flow_test

import (
	"log/slog"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"

	memorychannel "github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

// newMem returns a started memory channel.
func newMem(t testing.TB, name string, capacity, txCap int, keepAlive string) flow.Channel {
	t.Helper()
	p := config.FromMap("a1.channels."+name+".", map[string]string{
		"capacity": strconv.Itoa(capacity), "transactionCapacity": strconv.Itoa(txCap), "keep-alive": keepAlive,
	})
	ch, err := memorychannel.New(flow.Env{Agent: "a1", Name: name, Type: "memory"}, p)
	if err != nil || p.Err() != nil {
		t.Fatalf("memory channel: %v %v", err, p.Err())
	}
	if err := ch.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return ch
}

func histCount(t testing.TB, reg *metrics.Registry, stage metrics.Stage, component string) uint64 {
	t.Helper()
	for _, s := range reg.LatencySnapshot() {
		if s.Stage == stage && s.Component == component {
			return s.Count
		}
	}
	return 0
}

func dropped(reg *metrics.Registry, component, reason string) float64 {
	var m dto.Metric
	if err := reg.Dropped(component, reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

var (
	events = testutil.Events
	bodies = testutil.Bodies
)

var quietLog = slog.New(slog.DiscardHandler)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
