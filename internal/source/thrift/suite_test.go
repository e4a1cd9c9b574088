package thriftsource_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/source/sourcetest"
	thriftsource "github.com/sluicehq/sluice/internal/source/thrift"
	"github.com/sluicehq/sluice/internal/thriftrpc"
)

// TestSourceSuite runs the source contract against the thrift source,
// with Flume's Thrift RPC client (thriftrpc, as the thrift sink sends) as
// its sender: a batch is acknowledged OK, refused FAILED when the channel
// is full or the agent stopping.
func TestSourceSuite(t *testing.T) {
	sourcetest.RunSourceSuite(t, sourcetest.Harness{
		Type: "thrift", New: thriftsource.New, Props: sourcetest.Loopback(nil),
		Dial: dialThrift, Acks: true, StoppingReply: "FAILED",
		Malformed: []byte{0x7f, 0, 0, 0}, // a frame of 2 GB, over max-frame-size
	})
}

func dialThrift(ctx context.Context, addr string) (sourcetest.Session, error) {
	c, err := thriftrpc.Dial(ctx, addr, thriftrpc.ClientConfig{ConnectTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	return sourcetest.RPCSession(c, thriftrpc.OK), nil
}
