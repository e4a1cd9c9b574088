package loggersink

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/event"
)

func TestAppendDump(t *testing.T) {
	f := func(name string, e event.Event, maxBytes int, want string) {
		t.Helper()
		if got := string(AppendDump(nil, &e, maxBytes)); got != want {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
	// Layout of Flume's EventHelper.dumpEvent over commons-io HexDump.
	f("hello", event.Event{Body: []byte("hello")}, 16,
		"{ headers:{} body: 68 65 6C 6C 6F                                  hello }")
	f("flume quickstart line", event.Event{Body: []byte("hello world\r")}, 16,
		"{ headers:{} body: 68 65 6C 6C 6F 20 77 6F 72 6C 64 0D             hello world. }")
	f("truncated to maxBytes", event.Event{Body: []byte("0123456789abcdefXYZ")}, 16,
		"{ headers:{} body: 30 31 32 33 34 35 36 37 38 39 61 62 63 64 65 66 0123456789abcdef }")
	f("second line has its offset", event.Event{Body: []byte("0123456789abcdefXYZ")}, 32,
		"{ headers:{} body: 30 31 32 33 34 35 36 37 38 39 61 62 63 64 65 66 0123456789abcdef\n"+
			"00000010 58 59 5A                                        XYZ }")
	f("empty body", event.Event{Headers: event.HeadersOf(map[string]string{"a": "1"})}, 16,
		"{ headers:{a=1} body: }")
	f("maxBytes 0", event.Event{Body: []byte("x")}, 0, "{ headers:{} body: }")
	f("headers sorted, non-printable as dots", event.Event{
		Headers: event.Headers{{Key: "timestamp", Value: "1700000000000"}, {Key: "host", Value: "web1"}},
		Body:    []byte{0x00, 0x7f, 0x80, 0xff, ' ', '~'},
	}, 16, "{ headers:{host=web1, timestamp=1700000000000} body: 00 7F 80 FF 20 7E "+strings.Repeat("   ", 10)+".... ~ }")
}

// recorder keeps the messages and levels of the records it handles.
type recorder struct {
	level slog.Level
	msgs  []string
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func TestWriterLogsEachEventAtInfo(t *testing.T) {
	rec := &recorder{level: slog.LevelInfo}
	w := NewWriter(slog.New(rec), 4)
	err := w.Write(context.Background(), []event.Event{
		{Body: []byte("first")},
		{Headers: event.HeadersOf(map[string]string{"k": "v"}), Body: []byte("second")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"INFO Event: { headers:{} body: 66 69 72 73" + strings.Repeat("   ", 12) + " firs }",
		"INFO Event: { headers:{k=v} body: 73 65 63 6F" + strings.Repeat("   ", 12) + " seco }",
	}
	if strings.Join(rec.msgs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged\n%s\nwant\n%s", strings.Join(rec.msgs, "\n"), strings.Join(want, "\n"))
	}
}

func TestWriterSkipsWhenInfoDisabled(t *testing.T) {
	rec := &recorder{level: slog.LevelWarn}
	w := NewWriter(slog.New(rec), 16)
	if err := w.Write(context.Background(), []event.Event{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if len(rec.msgs) != 0 {
		t.Fatalf("logged %q with INFO disabled", rec.msgs)
	}
}

func TestTextHandlerOutputIsReadable(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(slog.New(slog.NewTextHandler(&buf, nil)), 16)
	if err := w.Write(context.Background(), []event.Event{{Body: []byte("hello")}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `msg="Event: { headers:{} body: 68 65 6C 6C 6F`) {
		t.Fatalf("unexpected log line %q", buf.String())
	}
}

func BenchmarkWrite(b *testing.B) {
	w := NewWriter(slog.New(slog.DiscardHandler), 16)
	evs := []event.Event{{Headers: event.HeadersOf(map[string]string{"host": "web1"}), Body: bytes.Repeat([]byte("x"), 256)}}
	b.ReportAllocs()
	for b.Loop() {
		w.Write(context.Background(), evs)
	}
}

// BenchmarkAppendDump prints events of few and of many headers: a hostile
// sender may give one event tens of thousands, and the dump must stay
// n log n in them (ns/header should hardly grow with the count).
//
//	go test -run XXX -bench BenchmarkAppendDump -benchmem ./internal/sink/logger/
func BenchmarkAppendDump(b *testing.B) {
	for _, n := range []int{3, 1000, 10000} {
		var h event.Headers
		for i := range n {
			h = append(h, event.Header{Key: "header-" + strconv.Itoa(n-i), Value: strconv.Itoa(i)})
		}
		e := &event.Event{Headers: h, Body: []byte("body")}
		b.Run("headers="+strconv.Itoa(n), func(b *testing.B) {
			var dst []byte
			for b.Loop() {
				dst = AppendDump(dst[:0], e, 16)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/header")
		})
	}
}
