package bench

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

// TestOTLP sends with the otlp sender to the otlp receiver, straight (the
// floor) and through the bridge config the OTLP presets use.
func TestOTLP(t *testing.T) {
	dir, err := findExamples("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, conf string
	}{{"straight", ""}, {"through otlp -> memory -> otlp", filepath.Join(dir, "bench-otlp.properties")}} {
		t.Run(tc.name, func(t *testing.T) {
			opt := Options{
				Label:   tc.name,
				Load:    Load{Transport: SendOTLP, Count: 3000, Size: 256, Conns: 2, Batch: 500},
				Receive: Receive{Kind: ReceiveOTLP},
				Drain:   5 * time.Second,
				Logger:  slog.New(slog.DiscardHandler),
			}
			if tc.conf != "" {
				opt.Agent = &AgentConfig{File: tc.conf, Name: "a1"}
			}
			res, err := Run(context.Background(), opt)
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent != 3000 || res.Received != 3000 || res.Lost != 0 || res.Malformed != 0 || res.Err != nil {
				t.Errorf("%v malformed %d err %v", res.Report, res.Malformed, res.Err)
			}
		})
	}
}
