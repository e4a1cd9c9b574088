package taildirsource

import (
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/containerlog"
	"github.com/sluicehq/sluice/internal/event"
)

// TestBuildRecordsHeaders checks the headers buildRecords gives a batch of
// container log lines (built once a batch where it can) against the plain
// way of making them: every header set on each event in turn, the later
// winning. The batch has lines of one second and of the next, times before
// 1970 and in its first second, a bad record, pieces and a last piece with
// no time; the group's headers, the pod's, the file header and the byte
// offsets are on, some with the names of the record headers.
func TestBuildRecordsHeaders(t *testing.T) {
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) ([]byte, int64) {
		tm := t0.Add(d)
		return []byte(tm.Format(time.RFC3339Nano)), tm.UnixNano()
	}
	var lines []recLine
	for i, d := range []time.Duration{0, 1, 999 * time.Millisecond, time.Second, 1500 * time.Millisecond, time.Hour} {
		tm, ns := at(d)
		lines = append(lines, recLine{body: []byte("line " + strconv.Itoa(i)), stream: containerlog.Stream(i % 2), time: tm, nanos: ns, off: 100 * i})
	}
	for _, tm := range []time.Time{time.Unix(0, 5e8).UTC(), time.Unix(0, 0).UTC(), time.Unix(-1, 0).UTC(), time.Date(1900, 1, 1, 0, 0, 0, 1e6, time.UTC)} {
		lines = append(lines, recLine{body: []byte("old"), time: []byte(tm.Format(time.RFC3339Nano)), nanos: tm.UnixNano(), off: 700})
	}
	tm, ns := at(2 * time.Second)
	lines = append(lines,
		recLine{body: []byte("junk"), bad: "not a cri record", off: 800},
		recLine{body: []byte("long "), stream: containerlog.Stderr, time: tm, nanos: ns, piece: 1, off: 900},
		recLine{body: []byte("line"), stream: containerlog.Stderr, time: tm, nanos: ns, piece: 2, off: 900},
		recLine{body: nil, stream: containerlog.Stdout, piece: 3, last: true, off: 1000},
		recLine{body: []byte("taken over"), stream: containerlog.Stdout, time: tm, nanos: ns, off: 10},
	)
	// The times of every other line are parts of the bytes read, as the
	// cutter leaves them (their header is then a part of those bytes); the
	// others are copies (as of an escaped Docker time).
	var data []byte
	for i := 0; i < len(lines); i += 2 {
		if lines[i].time != nil {
			data = append(append(data, "xx "...), lines[i].time...)
		}
	}
	for i, at := 0, 0; i < len(lines); i++ {
		if i%2 == 0 && lines[i].time != nil {
			at += 3
			lines[i].time = data[at : at+len(lines[i].time)]
			at += len(lines[i].time)
		}
		if at, ok := within(data, lines[i].time); ok != (i%2 == 0 && lines[i].time != nil) || ok && string(data[at-3:at]) != "xx " {
			t.Fatalf("line %d: time in data %v", i, ok)
		}
	}
	g := &group{headers: event.HeadersOf(map[string]string{"env": "prod", "stream": "group's"})}
	tf := &tailFile{path: "/var/log/pods/ns_pod_uid/c/0.log", group: g}
	hs := recHeaderSet{pod: [][2]string{{k8sNamespace, "ns"}, {k8sPod, "pod"}}, kube: [][2]string{{k8sNode, "node-1"}, {"env", "kube's"}}}
	for _, fileKey := range []string{"file", "time"} {
		tr := &tailer{s: &Source{fileHeader: true, fileHeaderKey: fileKey, byteOffsetHeader: true}}
		const pl, xStart, yStart = 50, 7000, 9000
		got := tr.buildRecords(tf, hs, lines, data, pl, xStart, yStart, 1)
		if len(got) != len(lines) {
			t.Fatalf("%d events of %d lines", len(got), len(lines))
		}
		for i, l := range lines {
			want := map[string]string{}
			maps.Insert(want, g.headers.All())
			for _, kv := range append(append([][2]string(nil), hs.pod...), hs.kube...) {
				want[kv[0]] = kv[1]
			}
			want[fileKey] = tf.path
			off := yStart + int64(l.off-pl)
			if l.off < pl {
				off = xStart + int64(l.off)
			}
			want["byteoffset"] = strconv.FormatInt(off, 10)
			if l.bad != "" {
				want[formatErrorHeader] = l.bad
			} else {
				want[streamHeader] = l.stream.String()
				if l.time != nil {
					want[timeHeader] = string(l.time)
					want[timestampHeader] = strconv.FormatInt(l.nanos/1e6, 10)
				}
			}
			if l.piece > 0 {
				want[pieceHeader] = strconv.Itoa(l.piece)
				want[lastPieceHeader] = strconv.FormatBool(l.last)
			}
			if !event.HeadersOf(want).Equal(got[i].Headers) {
				t.Errorf("fileHeaderKey %s, line %d: headers\n%v\nwant\n%v", fileKey, i, got[i].Headers, want)
			}
			if string(got[i].Body) != string(l.body) {
				t.Errorf("line %d: body %q, want %q", i, got[i].Body, l.body)
			}
		}
	}
}

// TestMillisText checks the milliseconds' digits against strconv: at the
// bounds of the fast path, across the 100 seconds whose first digits are
// kept, and on random values in an order that goes back and forth.
func TestMillisText(t *testing.T) {
	var m millisText
	check := func(ms int64) {
		t.Helper()
		if got, want := string(m.format(ms)), strconv.FormatInt(ms, 10); got != want {
			t.Fatalf("format(%d) = %s, want %s", ms, got, want)
		}
	}
	for _, ms := range []int64{0, 1, -1, 999, 1000, -1500, 1e12 - 1, 1e12, 1e12 + 1, 1e13 - 1, 1e13, 1e13 + 1, 1714557600123,
		1714557699999, 1714557700000, 1714557600123, math.MaxInt64, math.MinInt64, 9999999999999, 1e12 + 99999, 1e12 + 100000} {
		check(ms)
	}
	r := rand.New(rand.NewPCG(3, 4))
	ms := int64(1714557600000)
	for range 200000 {
		switch r.IntN(4) {
		case 0:
			ms = 1e12 + r.Int64N(9e12)
		case 1:
			ms += r.Int64N(1000)
		case 2:
			ms -= r.Int64N(100000)
		default:
			check(r.Int64N(2e12))
		}
		check(ms)
	}
}
