package loggersink

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
)

func TestSinkLogsEveryEventInOrder(t *testing.T) {
	ctx := context.Background()
	ch, err := memorychannel.New(flow.Env{Name: "c1", Type: "memory"},
		config.FromMap("a1.channels.c1.", map[string]string{"capacity": "1000", "transactionCapacity": "100"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer ch.Stop(ctx)
	rec := &recorder{level: slog.LevelInfo}
	p := config.FromMap("a1.sinks.k1.", map[string]string{"maxBytesToLog": "32"})
	s, err := New(flow.Env{Name: "k1", Type: "logger", Logger: slog.New(rec), Channel: ch}, p)
	if err != nil || p.Err() != nil {
		t.Fatal(err, p.Err())
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	evs := testutil.Events("event-", 150)
	if err := testutil.PutCommit(ch, evs[:100]); err != nil {
		t.Fatal(err)
	}
	if err := testutil.PutCommit(ch, evs[100:]); err != nil {
		t.Fatal(err)
	}
	for ch.Len() > 0 {
		if _, err := s.Process(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Stop(ctx)
	if len(rec.msgs) != len(evs) {
		t.Fatalf("logged %d events, want %d", len(rec.msgs), len(evs))
	}
	for i, m := range rec.msgs {
		want := "INFO Event: " + string(AppendDump(nil, &evs[i], 32))
		if m != want {
			t.Fatalf("record %d = %q, want %q", i, m, want)
		}
		if !strings.Contains(m, "headers:{i=") || !strings.HasSuffix(m, string(evs[i].Body)+" }") {
			t.Fatalf("record %d = %q does not show the headers and body", i, m)
		}
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		props map[string]string
		err   string
	}{
		{map[string]string{}, ""},
		{map[string]string{"maxBytesToLog": "64"}, ""},
		{map[string]string{"maxBytesToLog": "-1"}, "a1.sinks.k1.maxBytesToLog: -1 is out of range"},
		{map[string]string{"maxBytesToLog": "x"}, `"x" is not a whole number`},
		{map[string]string{"batchSize": "10"}, "a1.sinks.k1.batchSize: ignored: sluice does not read it"},
	}
	for _, tt := range tests {
		p := config.FromMap("a1.sinks.k1.", tt.props)
		if _, err := New(flow.Env{Name: "k1", Type: "logger"}, p); err != nil {
			t.Fatal(err)
		}
		p.Unused()
		if tt.err == "" && p.Err() != nil || tt.err != "" && (p.Err() == nil || !strings.Contains(p.Err().Error(), tt.err)) {
			t.Errorf("%v: problems %v, want %q", tt.props, p.Err(), tt.err)
		}
	}
}
