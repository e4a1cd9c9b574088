package avrosource_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	avrosource "github.com/sluicehq/sluice/internal/source/avro"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestSourceSuite runs the source contract against the avro source, with
// Flume's Avro RPC client (avrorpc, as the avro sink sends) as its sender:
// a batch is acknowledged OK, refused FAILED.
func TestSourceSuite(t *testing.T) {
	// A pack of one frame of 2 GiB: more than max-message-bytes, refused
	// as soon as its length is read.
	malformed := binary.BigEndian.AppendUint32(nil, 1)
	malformed = binary.BigEndian.AppendUint32(malformed, 1)
	malformed = binary.BigEndian.AppendUint32(malformed, 1<<31-1)
	sourcetest.RunSourceSuite(t, sourcetest.Harness{
		Type: "avro", New: avrosource.New, Props: sourcetest.Loopback(nil),
		Dial: dialAvro, Acks: true, StoppingReply: "FAILED", Malformed: malformed,
	})
}

func dialAvro(ctx context.Context, addr string) (sourcetest.Session, error) {
	c, err := avrorpc.Dial(ctx, addr, avrorpc.ClientConfig{ConnectTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	return sourcetest.RPCSession(c, avrorpc.OK), nil
}
