package otlpsource_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	otlpsource "github.com/sluicehq/sluice/internal/source/otlp"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// TestSourceSuite runs the source contract against the otlp source's
// OTLP/HTTP listener, with requests made by OpenTelemetry's own pdata: an
// export is acknowledged 200, refused 503 when the channel is full or the
// agent stopping.
func TestSourceSuite(t *testing.T) {
	sourcetest.RunSourceSuite(t, sourcetest.Harness{
		Type: "otlp", New: otlpsource.New,
		Props: map[string]string{"bind": "127.0.0.1", "grpcPort": "-1", "httpPort": "0"},
		Dial: func(_ context.Context, addr string) (sourcetest.Session, error) {
			return sourcetest.HTTPSession("http://"+addr+"/v1/logs", "application/x-protobuf", exportRequest), nil
		},
		Acks: true, StoppingReply: "503",
		Malformed: []byte("NOT HTTP AT ALL\r\n\r\n"),
	})
}

// exportRequest is an OTLP ExportLogsServiceRequest in protobuf with one
// log record per body.
func exportRequest(bodies []string) ([]byte, error) {
	ld := plog.NewLogs()
	recs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for _, b := range bodies {
		recs.AppendEmpty().Body().SetStr(b)
	}
	return plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
}
