package httpsource_test

import (
	"context"
	"encoding/json"
	"testing"

	httpsource "github.com/sluicehq/sluice/internal/source/http"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestSourceSuite runs the source contract against the http source, with
// net/http's client posting Flume's JSON: a request is acknowledged 200,
// refused 503 when the channel is full or the agent stopping.
func TestSourceSuite(t *testing.T) {
	sourcetest.RunSourceSuite(t, sourcetest.Harness{
		Type: "http", New: httpsource.New, Props: sourcetest.Loopback(nil),
		Dial: func(_ context.Context, addr string) (sourcetest.Session, error) {
			return sourcetest.HTTPSession("http://"+addr, "application/json", flumeJSON), nil
		},
		Acks: true, StoppingReply: "503",
		Malformed: []byte("NOT HTTP AT ALL\r\n\r\n"),
	})
}

// flumeJSON is bodies as Flume's JSONHandler reads them.
func flumeJSON(bodies []string) ([]byte, error) {
	type jsonEvent struct {
		Body string `json:"body"`
	}
	events := make([]jsonEvent, len(bodies))
	for i, b := range bodies {
		events[i].Body = b
	}
	return json.Marshal(events)
}
