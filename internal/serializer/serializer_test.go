package serializer

import (
	"bytes"
	"testing"

	"github.com/hamba/avro/v2/ocf"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
)

func TestText(t *testing.T) {
	evs := []event.Event{
		{Headers: event.Headers{{Key: "b", Value: "2"}, {Key: "a", Value: "1"}}, Body: []byte("one")},
		{Body: []byte("two")},
	}
	for _, tc := range []struct {
		name string
		opt  Options
		want string
	}{
		{"text", Options{Kind: Text, AppendNewline: true}, "one\ntwo\n"},
		{"text without newline", Options{Kind: Text}, "onetwo"},
		{"header and text", Options{Kind: HeaderAndText, AppendNewline: true}, "{a=1, b=2} one\n{} two\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			s, err := New(tc.opt, &buf)
			if err != nil {
				t.Fatal(err)
			}
			for i := range evs {
				if err := s.Write(&evs[i]); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.want {
				t.Fatalf("got %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

// TestAvroFlushEndsBlock checks that after each Flush the bytes written so
// far are a container a reader decodes completely.
func TestAvroFlushEndsBlock(t *testing.T) {
	var buf bytes.Buffer
	s, err := New(Options{Kind: AvroEvent, AvroCodec: "deflate"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 3; n++ {
		e := event.Event{Headers: event.HeadersOf(map[string]string{"n": string(rune('0' + n))}), Body: []byte("body")}
		if err := s.Write(&e); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		dec, err := ocf.NewDecoder(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for dec.HasNext() {
			var r struct {
				Headers map[string]string `avro:"headers"`
				Body    []byte            `avro:"body"`
			}
			if err := dec.Decode(&r); err != nil {
				t.Fatal(err)
			}
			got++
			if string(r.Body) != "body" || r.Headers["n"] != string(rune('0'+got)) {
				t.Fatalf("record %d = %+v", got, r)
			}
		}
		if got != n {
			t.Fatalf("after %d flushes a reader sees %d records", n, got)
		}
	}
}

func TestParse(t *testing.T) {
	p := config.FromMap("a1.sinks.k1.", map[string]string{"serializer": "avro_event", "serializer.compressionCodec": "snappy"})
	opt := Parse(p, "serializer")
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if opt.Kind != AvroEvent || opt.AvroCodec != "snappy" || opt.AvroSyncBytes != DefaultAvroSyncBytes {
		t.Fatalf("%+v", opt)
	}
	p = config.FromMap("a1.sinks.k1.", map[string]string{"serializer": "json"})
	Parse(p, "serializer")
	if p.Err() == nil {
		t.Fatal("unknown serializer accepted")
	}
}
