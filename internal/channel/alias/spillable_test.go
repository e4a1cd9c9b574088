package aliaschannel

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/channel/file"
	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/metrics"
	"github.com/sluicehq/sluice/internal/testutil"
)

// build builds the channel newCh makes of props (keys below
// a1.channels.c1.), as the agent would, and reports unread keys to p.
func build(t *testing.T, newCh flow.ChannelFactory, typ string, props map[string]string) (flow.Channel, *metrics.Registry, *config.Props) {
	t.Helper()
	reg := metrics.NewRegistry("a1")
	p := config.FromMap("a1.channels.c1.", props)
	ch, err := newCh(flow.Env{Agent: "a1", Name: "c1", Type: typ, Metrics: reg, Logger: slog.New(slog.DiscardHandler)}, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Unused()
	return ch, reg, p
}

func buildSpillable(t *testing.T, props map[string]string) (flow.Channel, *metrics.Registry, *config.Props) {
	t.Helper()
	return build(t, NewSpillable, "spillablememory", props)
}

func capacity(reg *metrics.Registry) string {
	return testutil.ComponentMetric(reg, metrics.KindChannel, "c1", "ChannelCapacity")
}

func notes(p *config.Props) string {
	var b strings.Builder
	for _, pr := range p.Problems().Sorted() {
		b.WriteString(pr.String() + "\n")
	}
	return b.String()
}

// The User Guide's first example: a file channel of memoryCapacity +
// overflowCapacity events on the given directories, byteCapacity as its
// in-memory cache, durable across a restart; the start says so.
func TestRunsAsFileChannel(t *testing.T) {
	dir := t.TempDir()
	props := map[string]string{"memoryCapacity": "10", "overflowCapacity": "100", "byteCapacity": "800000",
		"checkpointDir": filepath.Join(dir, "ck"), "dataDirs": filepath.Join(dir, "data"), "minimumRequiredSpace": "0",
		"capacity": "5", "overflowTimeout": "3"}
	ch, reg, p := buildSpillable(t, props)
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := ch.(*filechannel.Channel); !ok {
		t.Fatalf("built %T, want the file channel", ch)
	}
	if got := capacity(reg); got != "110" {
		t.Errorf("ChannelCapacity %s, want 110 (memoryCapacity + overflowCapacity; capacity is the channel's own)", got)
	}
	n := notes(p)
	for _, want := range []string{"runs as a file channel of 110 events", "capacity: ignored", "overflowTimeout: ignored"} {
		if !strings.Contains(n, want) {
			t.Errorf("notes lack %q:\n%s", want, n)
		}
	}
	if err := ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := testutil.PutCommit(ch, testutil.Events("e", 50)); err != nil {
		t.Fatal(err)
	}
	if err := ch.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, _, _ := buildSpillable(t, props)
	if err := again.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer again.Stop(context.Background())
	if got := testutil.TakeAll(t, again, 50, 50, time.Second); len(got) != 50 {
		t.Fatalf("after a restart the channel gave %d of the 50 events", len(got))
	}
}

func TestMemoryOnly(t *testing.T) {
	ch, reg, p := buildSpillable(t, map[string]string{"memoryCapacity": "100000", "overflowCapacity": "0"})
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := ch.(*memorychannel.Channel); !ok {
		t.Fatalf("built %T, want the memory channel", ch)
	}
	if got := capacity(reg); got != "100000" {
		t.Errorf("ChannelCapacity %s, want memoryCapacity 100000", got)
	}
	if n := notes(p); !strings.Contains(n, "runs as a memory channel of 100000 events") {
		t.Errorf("notes:\n%s", n)
	}
}

// Both 0: Flume warns and uses overflowCapacity's default.
func TestBothZero(t *testing.T) {
	dir := t.TempDir()
	_, reg, p := buildSpillable(t, map[string]string{"memoryCapacity": "0", "overflowCapacity": "0",
		"checkpointDir": filepath.Join(dir, "ck"), "dataDirs": filepath.Join(dir, "data")})
	if n := notes(p); !strings.Contains(n, "could hold nothing; overflowCapacity is 100000000") {
		t.Fatalf("problems:\n%s", n)
	}
	if got := capacity(reg); got != "100000000" {
		t.Errorf("ChannelCapacity %s, want the default overflowCapacity", got)
	}
}
