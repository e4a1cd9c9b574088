package event

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestHeaders(t *testing.T) {
	var h Headers
	if v, ok := h.Get("a"); ok || v != "" || h.Has("a") || h.Len() != 0 || h.Map() != nil {
		t.Fatal("the zero Headers must be empty")
	}
	h.Set("a", "1")
	h.Set("b", "2")
	h.Set("a", "3") // in place: a stays first
	if len(h) != 2 || h[0] != (Header{"a", "3"}) || h[1] != (Header{"b", "2"}) {
		t.Fatalf("after sets: %v", h)
	}
	h.Delete("absent")
	h.Delete("a")
	if len(h) != 1 || h.Value("b") != "2" || h.Has("a") {
		t.Fatalf("after delete: %v", h)
	}
	c := h.Clone()
	c.Set("b", "changed")
	if h.Value("b") != "2" {
		t.Fatal("a clone's changes show in the original")
	}
	if got := HeadersOf(map[string]string{"z": "1", "a": "2", "m": "3"}); got[0].Key != "a" || got[1].Key != "m" || got[2].Key != "z" {
		t.Fatalf("HeadersOf is not sorted by key: %v", got)
	}
	if !HeadersOf(map[string]string{"x": "1", "y": "2"}).Equal(Headers{{"y", "2"}, {"x", "1"}}) {
		t.Fatal("Equal must not depend on order")
	}
	if (Headers{{"x", "1"}}).Equal(Headers{{"x", "2"}}) || (Headers{{"x", "1"}}).Equal(nil) ||
		(Headers{{"a", "1"}, {"a", "1"}}).Equal(Headers{{"a", "1"}, {"b", "2"}}) {
		t.Fatal("Equal of different headers")
	}
	var keys []string
	for k, v := range (Headers{{"a", "1"}, {"b", "2"}}).All() {
		keys = append(keys, k+"="+v)
	}
	if strings.Join(keys, ",") != "a=1,b=2" {
		t.Fatalf("All yields %v", keys)
	}
}

// TestAppendSorted: the appended copy is ordered by key, what dst held
// before stays as it was, and h is not touched.
func TestAppendSorted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h, dst  Headers
		want    Headers
		wantOut Headers // h after
	}{
		{"empty", nil, nil, nil, nil},
		{"one", Headers{{"a", "1"}}, nil, Headers{{"a", "1"}}, Headers{{"a", "1"}}},
		{"several", Headers{{"m", "1"}, {"a", "2"}, {"z", "3"}, {"b", "4"}}, nil,
			Headers{{"a", "2"}, {"b", "4"}, {"m", "1"}, {"z", "3"}}, Headers{{"m", "1"}, {"a", "2"}, {"z", "3"}, {"b", "4"}}},
		{"after dst", Headers{{"b", "1"}, {"a", "2"}}, Headers{{"z", "0"}},
			Headers{{"z", "0"}, {"a", "2"}, {"b", "1"}}, Headers{{"b", "1"}, {"a", "2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.h.AppendSorted(tc.dst)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("AppendSorted = %v, want %v", got, tc.want)
			}
			if !slices.Equal(tc.h, tc.wantOut) {
				t.Fatalf("h became %v, want %v", tc.h, tc.wantOut)
			}
		})
	}
	// Many headers: every pair once, in order (a writer walks them so, with
	// no lookup per key).
	var many Headers
	for i := 5000; i > 0; i-- {
		many = append(many, Header{"k" + strconv.Itoa(i), strconv.Itoa(i)})
	}
	got := many.AppendSorted(nil)
	for i := 1; i < len(got); i++ {
		if got[i-1].Key >= got[i].Key || many.Value(got[i].Key) != got[i].Value {
			t.Fatalf("pair %d: %v after %v", i, got[i], got[i-1])
		}
	}
}

// TestDedupe holds Dedupe to what a map decoded from the same pairs holds,
// on both sides of smallHeaders.
func TestDedupe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pairs []string
		want  string // the keys in order, with their values
	}{
		{"empty", nil, ""},
		{"one", []string{"a", "1"}, "a=1"},
		{"unique", []string{"a", "1", "b", "2"}, "a=1,b=2"},
		{"last wins at the first place", []string{"a", "1", "b", "2", "a", "3"}, "a=3,b=2"},
		{"all the same", []string{"a", "1", "a", "2", "a", "3"}, "a=3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Headers
			for i := 0; i+1 < len(tc.pairs); i += 2 {
				h = append(h, Header{tc.pairs[i], tc.pairs[i+1]})
			}
			h.Dedupe()
			var got []string
			for _, kv := range h {
				got = append(got, kv.Key+"="+kv.Value)
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("got %v, want %s", got, tc.want)
			}
		})
	}
	// Past smallHeaders: 100 keys, each written twice.
	var h Headers
	want := map[string]string{}
	for round := range 2 {
		for i := range 100 {
			k, v := "k"+strconv.Itoa(i), strconv.Itoa(round*1000+i)
			h = append(h, Header{k, v})
			want[k] = v
		}
	}
	h.Dedupe()
	if len(h) != 100 || !maps.Equal(h.Map(), want) || h[0].Key != "k0" || h[99].Key != "k99" {
		t.Fatalf("dedupe of 200 pairs: %d headers, first %v", len(h), h[0])
	}
}

// TestArenaRegionsAreTheirOwn: growing one event's headers past what Make
// gave must not write into the next event's.
func TestArenaRegionsAreTheirOwn(t *testing.T) {
	var a HeaderArena
	x := append(a.Make(1), Header{"x", "1"})
	y := append(a.Make(1), Header{"y", "1"})
	x.Set("x2", "2") // past x's room: moves
	if len(y) != 1 || y[0] != (Header{"y", "1"}) {
		t.Fatalf("y changed by x's growth: %v", y)
	}
	if x.Value("x2") != "2" || x.Value("x") != "1" {
		t.Fatalf("x after growing: %v", x)
	}
	// A request larger than a chunk is served too.
	if big := a.Make(arenaChunk + 1); cap(big) != arenaChunk+1 || len(big) != 0 {
		t.Fatalf("Make(%d): len %d cap %d", arenaChunk+1, len(big), cap(big))
	}
}

func FuzzDedupe(f *testing.F) {
	f.Add("a=1,b=2,a=3")
	f.Add("k=v")
	f.Add(strings.Repeat("x=1,y=2,", 20))
	f.Fuzz(func(t *testing.T, s string) {
		var h Headers
		want := map[string]string{}
		for _, p := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(p, "=")
			h = append(h, Header{k, v})
			want[k] = v
		}
		h.Dedupe()
		if !maps.Equal(h.Map(), want) || len(h) != len(want) {
			t.Fatalf("Dedupe(%q) = %v, want %v", s, h, want)
		}
	})
}

var (
	mapSink   map[string]string
	sliceSink Headers
)

// BenchmarkHeaders makes the three headers a container log line gets, as
// a map of its own and as a region of an arena.
func BenchmarkHeaders(b *testing.B) {
	b.Run("slice", func(b *testing.B) {
		b.ReportAllocs()
		var a HeaderArena
		for b.Loop() {
			h := a.Make(4)
			h = append(h, Header{"stream", "stdout"}, Header{"timestamp", "1700000000000"}, Header{"time", "2023-11-14T22:13:20Z"})
			if h.Value("timestamp") == "" {
				b.Fatal("lost")
			}
			sliceSink = h
		}
	})
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h := make(map[string]string, 4)
			h["stream"], h["timestamp"], h["time"] = "stdout", "1700000000000", "2023-11-14T22:13:20Z"
			if h["timestamp"] == "" {
				b.Fatal("lost")
			}
			mapSink = h // as an event's would, the map escapes
		}
	})
}
