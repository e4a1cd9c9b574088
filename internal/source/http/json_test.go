package httpsource

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/event"
)

func TestDecodeJSONUTF32(t *testing.T) {
	in := []byte{0, 0, 0, '[', 0, 0, 0, '{', 0, 0, 0, '"', 0, 0, 0, 'b', 0, 0, 0, 'o', 0, 0, 0, 'd', 0, 0, 0, 'y', 0, 0, 0, '"', 0, 0, 0, ':', 0, 0, 0, '"', 0, 1, 0xF6, 0x00, 0, 0, 0, '"', 0, 0, 0, '}', 0, 0, 0, ']'}
	got, err := DecodeJSON(in, "utf-32")
	if err != nil {
		t.Fatal(err)
	}
	if want := "\x00\x01\xf6\x00"; len(got) != 1 || string(got[0].Body) != want {
		t.Fatalf("got %v, want one event with body %q", got, want)
	}
	if _, err := DecodeJSON(in[:5], "UTF-32"); err == nil {
		t.Fatal("a truncated UTF-32 body decoded")
	}
}

// FuzzJSONHandler feeds arbitrary request bodies to the JSON handler's
// decoder: it must never panic, must fail only with a request error, and
// what it accepts must survive a round trip through JSON unchanged.
func FuzzJSONHandler(f *testing.F) {
	for _, s := range []string{
		`[{"headers":{"a":"b"},"body":"text"}]`,
		`[]`,
		`[{"headers":{"n":1.50,"t":true,"z":null},"body":"é \u00e9 \ud83d\ude00"}]`,
		`[{"body":null},{}]`,
		`[{"headers":{"k":{}}}]`,
		`[{"body":"x"},]`,
		`{"body":"x"}`,
		`null`,
		"[\n {\"body\": x}]",
		"\xfe\xff\x00[\x00]",
		`[{"headers":{"a":"1","a":"2"},"body":"dup"}]`,
	} {
		for _, cs := range []string{"", "utf-16", "UTF-32", "latin1"} {
			f.Add([]byte(s), cs)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, charset string) {
		events, err := DecodeJSON(data, charset)
		if err != nil {
			var bad *BadRequestError
			var cs *UnsupportedCharsetError
			if !errors.As(err, &bad) && !errors.As(err, &cs) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if charset != "" && charset != "utf-8" {
			return
		}
		// Every header encoding/json reads is there, each once, none else
		// (the order comes from a scan of its own).
		var decoded []struct {
			Headers map[string]*string `json:"headers"`
		}
		if err := json.Unmarshal(data, &decoded); err == nil && len(decoded) == len(events) {
			for i, d := range decoded {
				want := map[string]string{}
				for k, v := range d.Headers {
					if v != nil {
						want[k] = *v
					}
				}
				if got := events[i].Headers.Map(); len(got) != len(events[i].Headers) || !maps.Equal(got, want) {
					t.Fatalf("event %d: headers %v, encoding/json reads %v", i, events[i].Headers, want)
				}
			}
		}
		type je struct {
			Headers map[string]string `json:"headers"`
			Body    string            `json:"body"`
		}
		out := make([]je, len(events))
		for i, e := range events {
			out[i] = je{e.Headers.Map(), string(e.Body)}
		}
		again, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		events2, err := DecodeJSON(again, "")
		if err != nil {
			t.Fatalf("re-encoded %s: %v", again, err)
		}
		if len(events2) != len(events) {
			t.Fatalf("round trip: %d events, then %d", len(events), len(events2))
		}
		for i := range events {
			if string(events[i].Body) != string(events2[i].Body) || !sameHeaders(events[i].Headers, events2[i].Headers) {
				t.Fatalf("event %d: %q %v, then %q %v", i, events[i].Body, events[i].Headers, events2[i].Body, events2[i].Headers)
			}
		}
	})
}

// FuzzDecodeFast: whatever the fast decoder accepts, it decodes exactly as
// the general (encoding/json) decoder does, the headers' order included.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range []string{
		`[{"headers":{"a":"b"},"body":"text"}]`,
		`[]`, ` [ ] `,
		`[{"headers":{"n":1.50,"t":true,"f":false,"z":null},"body":"é \u00e9 \ud83d\ude00"}]`,
		`[{"body":null},{}]`,
		`[{"headers":{}},{"headers":null},{"headers":{"z":null}}]`,
		`[{"headers":{"a":"1","a":"2"},"body":"dup"}]`,
		`[{"headers":{"a":"1","a":null}}]`,
		`[{"headers":{"b":"1","a":null,"c":"2","a":"3","b":"4"}}]`,
		`[{"body":-0.5e+10},{"body":0},{"body":"\"q\" \\ \/ \b\f\n\r\t"}]`,
		"[{\"body\":\"bad \xff utf8\"},{\"headers\":{\"\xfe\":\"k\"}}]",
		`[{"Body":"case"}]`, `[{"other":1}]`, `[{"body":"x"},]`, `[01]`, `[{"body":1.}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := decodeFast(data, scanShape(data).events)
		if !ok {
			return
		}
		general, err := decodeGeneral(data, "utf-8")
		if err != nil {
			t.Fatalf("fast decoded %q, the general decoder refused it: %v", data, err)
		}
		if len(fast) != len(general) {
			t.Fatalf("%q: %d events, general %d", data, len(fast), len(general))
		}
		for i := range fast {
			if string(fast[i].Body) != string(general[i].Body) || (fast[i].Body == nil) != (general[i].Body == nil) ||
				!slices.Equal(fast[i].Headers, general[i].Headers) || (fast[i].Headers == nil) != (general[i].Headers == nil) {
				t.Fatalf("%q event %d: fast %q %v, general %q %v", data, i, fast[i].Body, fast[i].Headers, general[i].Body, general[i].Headers)
			}
		}
	})
}

// BenchmarkDecode compares the fast decoder with encoding/json on requests
// of 10,000 events (B/op is what a request costs to decode):
//
//	go test -run '^$' -bench Decode -benchmem ./internal/source/http/
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct{ name, ev string }{
		{"tiny", `{"body":"x"}`},
		{"3headers", `{"headers":{"host":"web-01","app":"nginx","k":"v"},"body":"GET /index.html 200"}`},
	} {
		var buf []byte
		buf = append(buf, '[')
		for i := range 10000 {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, c.ev...)
		}
		buf = append(buf, ']')
		b.Run("fast/"+c.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for range b.N {
				if _, ok := decodeFast(buf, scanShape(buf).events); !ok {
					b.Fatal("not decoded")
				}
			}
		})
		b.Run("encoding-json/"+c.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for range b.N {
				if _, err := decodeGeneral(buf, "utf-8"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestHeaderOrder: the events' headers are in the order the request wrote
// them, as Flume's handler keeps them (Gson's map keeps insertion order),
// whichever decoder reads the request: a key given twice keeps its first
// place and its last value, a key whose last value is null is left out.
// The general decoder gets each input as it is and, where the fast one
// would take it, with a key it does not know added (which only the general
// one reads).
func TestHeaderOrder(t *testing.T) {
	h := func(kv ...string) event.Headers {
		var out event.Headers
		for i := 0; i < len(kv); i += 2 {
			out = append(out, event.Header{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name, headers string
		want          event.Headers
	}{
		{"written order", `{"d":"4","b":"2","a":"1","c":"3"}`, h("d", "4", "b", "2", "a", "1", "c", "3")},
		{"a null left out", `{"d":"4","b":"2","e":null,"a":"1"}`, h("d", "4", "b", "2", "a", "1")},
		{"twice: first place, last value", `{"z":"1","a":"2","z":"3"}`, h("z", "3", "a", "2")},
		{"null, then a value", `{"z":null,"a":"2","z":"3"}`, h("z", "3", "a", "2")},
		{"a value, then null", `{"z":"1","a":"2","z":null}`, h("a", "2")},
		{"numbers and booleans as written", `{"n":1.50,"t":true}`, h("n", "1.50", "t", "true")},
		{"all null", `{"z":null}`, event.Headers{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := `[{"headers":` + tc.headers + `,"body":"x"}]`
			if fast, ok := decodeFast([]byte(req), 1); ok && !slices.Equal(fast[0].Headers, tc.want) {
				t.Errorf("fast decoder: %v, want %v", fast[0].Headers, tc.want)
			}
			for _, in := range []string{req, `[{"headers":` + tc.headers + `,"body":"x","other":1}]`} {
				evs, err := decodeGeneral([]byte(in), "utf-8")
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(evs[0].Headers, tc.want) || evs[0].Headers == nil {
					t.Errorf("general decoder, %s: %v, want %v", in, evs[0].Headers, tc.want)
				}
			}
		})
	}
}

// sameHeaders reports whether a and b hold the same headers, in any order,
// each key once, as two maps compare equal.
func sameHeaders(a, b event.Headers) bool {
	return len(a) == len(b) && len(a.Map()) == len(a) && a.Equal(b)
}
