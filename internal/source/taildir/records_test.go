package taildirsource

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/containerlog"
)

// readAll cuts data as the tailer does: from the position with its state,
// at most maxEvents a batch, seeing at most slab bytes at a time (more when
// no event fits), and with flush once everything is there.
func readAll(t testing.TB, c recCutter, data []byte, maxEvents, slab int, flush bool) []recLine {
	var all []recLine
	pos, st := 0, recState{}
	size := slab
	for rounds := 0; ; rounds++ {
		if rounds > 10*len(data)+1000 {
			t.Fatalf("no progress at %d of %d", pos, len(data))
		}
		end := min(len(data), pos+size)
		st.flush = st.flush || (flush && end == len(data))
		// Odd rounds take a batch from a longer cut and commit its last
		// event's mark, as the tailer does with a read that holds several
		// batches; even rounds cut just one batch.
		var out []recLine
		var consumed int
		var next recState
		if rounds%2 == 1 {
			out, consumed, next = c.cut(data[pos:end], st, end == len(data), 1<<30)
			if len(out) > maxEvents {
				out = out[:maxEvents]
				consumed, next = out[maxEvents-1].mark.off, out[maxEvents-1].mark.st
			}
		} else {
			out, consumed, next = c.cut(data[pos:end], st, end == len(data), maxEvents)
		}
		if len(out) > maxEvents || consumed < 0 || consumed > end-pos {
			t.Fatalf("cut: %d events, consumed %d of %d", len(out), consumed, end-pos)
		}
		for _, l := range out {
			l.body = slices.Clone(l.body)
			l.time = slices.Clone(l.time)
			l.off += pos
			all = append(all, l)
		}
		if len(out) == 0 && consumed == 0 && next.pieces == st.pieces && next.sent == st.sent {
			if end == len(data) {
				return all
			}
			size *= 2
			continue
		}
		pos += consumed
		st = next
		size = slab
	}
}

func show(ls []recLine) []string {
	var s []string
	for _, l := range ls {
		x := string(l.body)
		if l.bad != "" {
			x = "!" + x
		} else {
			x = l.stream.String()[3:] + ":" + x
		}
		if l.piece > 0 {
			x += fmt.Sprintf("#%d", l.piece)
			if l.last {
				x += "$"
			}
		}
		s = append(s, x)
	}
	return s
}

func cri(lines ...string) []byte {
	var b bytes.Buffer
	for i, l := range lines {
		stream, rest, _ := strings.Cut(l, " ")
		tag, text, _ := strings.Cut(rest, " ")
		fmt.Fprintf(&b, "2024-05-01T10:00:%02d.%09dZ %s %s %s\n", i%60, i, stream, tag, text)
	}
	return b.Bytes()
}

func TestCutRecords(t *testing.T) {
	f := func(data []byte, limit int, flush bool, want ...string) {
		t.Helper()
		c := recCutter{format: containerlog.CRI, limit: limit, slack: 200}
		got := show(readAll(t, c, data, 1000, 1<<20, flush))
		if !slices.Equal(got, want) {
			t.Fatalf("got  %q\nwant %q", got, want)
		}
		// Batches of one event, and reads of a few bytes at a time, give
		// the same events: what a batch boundary or a restart cuts is
		// neither lost nor repeated.
		for _, maxEvents := range []int{1, 2, 3} {
			for _, slab := range []int{1, 7, 64} {
				if got := show(readAll(t, c, data, maxEvents, slab, flush)); !slices.Equal(got, want) {
					t.Fatalf("batches of %d, reads of %d bytes:\ngot  %q\nwant %q", maxEvents, slab, got, want)
				}
			}
		}
	}
	const big = 1 << 20
	f(cri("stdout F a", "stderr F b", "stdout F "), big, false, "out:a", "err:b", "out:")
	// Pieces joined.
	f(cri("stdout P a", "stdout P b", "stdout F c"), big, false, "out:abc")
	// Interleaved streams are joined each on its own (Fluent Bit #4387,
	// VictoriaLogs #1215): stdout=134, stderr=2.
	f(cri("stdout P 1", "stderr F 2", "stdout P 3", "stdout F 4"), big, false, "err:2", "out:134")
	f(cri("stdout P 1", "stderr P 2", "stdout F 3", "stderr F 4"), big, false, "out:13", "err:24")
	// A line not ended waits; with flush (idle, or a file complete) it is
	// sent as it is.
	f(cri("stdout F a", "stdout P b"), big, false, "out:a")
	f(cri("stdout F a", "stdout P b"), big, true, "out:a", "out:b")
	// A last record without its newline waits; with flush it is read.
	f(append(cri("stdout F a"), "2024-05-01T10:00:00Z stdout F b"...), big, false, "out:a")
	f(append(cri("stdout F a"), "2024-05-01T10:00:00Z stdout F b"...), big, true, "out:a", "out:b")
	// A line longer than the limit is sent in pieces of at most the limit,
	// cut at record boundaries where it can be.
	f(cri("stdout P abc", "stdout P def", "stdout P ghi", "stdout F j"), 7, false, "out:abcdef#1", "out:ghij#2$")
	f(cri("stdout P abcdefghij", "stdout F k"), 4, false, "out:abcd#1", "out:efgh#2", "out:ij#3", "out:k#4$")
	f(cri("stdout F abcdefghij"), 4, false, "out:abcd#1", "out:efgh#2", "out:ij#3$")
	// A line that does not end while the other stream writes on: once the
	// records since the last clean point pass limit + slack bytes (230
	// here; records of 42 bytes), it is sent so far, so the position can
	// move.
	f(cri("stdout P x", "stderr F 1", "stderr F 2", "stderr F 3", "stderr F 4", "stderr F 5", "stderr F 6", "stderr F 7", "stdout F y"), 30, false,
		"err:1", "err:2", "err:3", "err:4", "err:5", "out:x#1", "err:6", "err:7", "out:y#2$")
	// With flush after a piece was sent: the line's last piece is empty.
	f(cri("stdout P x", "stderr F 1", "stderr F 2", "stderr F 3", "stderr F 4", "stderr F 5", "stderr F 6", "stderr F 7"), 30, true,
		"err:1", "err:2", "err:3", "err:4", "err:5", "out:x#1", "err:6", "err:7", "out:#2$")
	// A UTF-8 character cut across records comes back whole.
	f(cri("stdout P ab\xe6\x97", "stdout F \xa5c"), big, false, "out:ab日c")
	// ... and a piece never cuts one.
	f(cri("stdout P ab\xe6\x97", "stdout F \xa5cd"), 4, false, "out:ab#1", "out:日c#2", "out:d#3$")
	// A line that is not a record is sent raw, marked.
	f(append(append(cri("stdout F a"), "garbage\r\n"...), cri("stdout F b")...), big, false, "out:a", "!garbage", "out:b")
	// Empty lines.
	f(cri("stdout F ", "stdout P ", "stdout F "), big, false, "out:", "out:")
}

func TestCutRecordsDocker(t *testing.T) {
	c := recCutter{format: containerlog.Docker, limit: 1 << 20, slack: recordSlack}
	// dockerd cuts a long line every 16 KiB; a multi-byte character cut
	// there is U+FFFD in both records already in the file.
	long := strings.Repeat("x", 16384)
	data := []byte(`{"log":"` + long + `","stream":"stdout","time":"2024-05-01T10:00:00.1Z"}` + "\n" +
		`{"log":"err\n","stream":"stderr","time":"2024-05-01T10:00:00.2Z"}` + "\n" +
		`{"log":"\ufffd` + long + `","stream":"stdout","time":"2024-05-01T10:00:00.3Z"}` + "\n" +
		`{"log":"end\r\n","stream":"stdout","time":"2024-05-01T10:00:00.4Z"}` + "\n")
	got := readAll(t, c, data, 100, 4096, false)
	if len(got) != 2 || string(got[0].body) != "err" || string(got[1].body) != long+"\ufffd"+long+"end" {
		t.Fatalf("got %q", show(got))
	}
	if string(got[1].time) != "2024-05-01T10:00:00.1Z" || got[1].off != 0 {
		t.Fatalf("the joined line's time %q or offset %d is not its first record's", got[1].time, got[1].off)
	}
}

// TestCutRecordsOverlong: a record longer than any runtime writes with its
// default settings is sent raw in pieces, marked, with memory bounded.
func TestCutRecordsOverlong(t *testing.T) {
	c := recCutter{format: containerlog.CRI, limit: 1000, slack: 64 << 10}
	text := strings.Repeat("y", c.slack+5000)
	data := append(cri("stdout F a", "stdout F "+text), cri("stdout F b")...)
	got := readAll(t, c, data, 100, 64<<10, false)
	var n int
	for _, l := range got {
		if len(l.body) > c.limit {
			t.Fatalf("an event of %d bytes", len(l.body))
		}
		if l.bad != "" {
			n += len(l.body)
		}
	}
	if string(got[0].body) != "a" || string(got[len(got)-1].body) != "b" || got[1].bad == "" || !strings.Contains(got[1].bad, "longer than maxLineLength") {
		t.Fatalf("got %d events, first %q, last %q, second marked %q", len(got), got[0].body, got[len(got)-1].body, got[1].bad)
	}
	if want := len(cri("stdout F "+text)) - 1; n != want {
		t.Fatalf("raw bytes sent %d, want %d", n, want)
	}
}

// FuzzCutRecords cuts any bytes in batches of any size and reads of any
// size and checks, against one cut of the whole: the same events (nothing
// lost or repeated at a batch boundary, a restart, a short read), none
// longer than the limit, and per stream the same text as the records hold,
// lines ending where the records say.
func FuzzCutRecords(f *testing.F) {
	f.Add(cri("stdout P 1", "stderr F 2", "stdout P 3", "stdout F 4"), 100, 1, 5, false)
	f.Add(cri("stdout P ab\xe6\x97", "stdout F \xa5cd", "stderr F x"), 4, 2, 3, true)
	f.Add(append(cri("stdout P x", "stderr F 1"), "junk\n\n"...), 3, 3, 17, true)
	f.Add([]byte(`{"log":"a","stream":"stdout","time":"2024-05-01T10:00:00Z"}`+"\n"), 10, 1, 1, true)
	f.Fuzz(func(t *testing.T, data []byte, limit, maxEvents, slab int, flush bool) {
		if limit < 1 || limit > 200 || maxEvents < 1 || maxEvents > 50 || slab < 1 || slab > 4096 || len(data) > 1<<14 {
			return
		}
		format := containerlog.CRI
		if len(data) > 0 && data[0] == '{' {
			format = containerlog.Docker
		}
		c := recCutter{format: format, limit: limit, slack: 64}
		for line := range bytes.Lines(data) {
			if len(line) > c.recordLimit() {
				return // raw pieces of an over-long record: TestCutRecordsOverlong
			}
		}
		whole := readAll(t, c, data, 1<<20, len(data)+1, flush)
		parts := readAll(t, c, data, maxEvents, slab, flush)
		if !slices.EqualFunc(whole, parts, func(a, b recLine) bool {
			return bytes.Equal(a.body, b.body) && a.stream == b.stream && a.piece == b.piece && a.last == b.last &&
				(a.bad == "") == (b.bad == "") && a.off == b.off && bytes.Equal(a.time, b.time)
		}) {
			t.Fatalf("batches of %d, reads of %d:\n%q\nwhole:\n%q", maxEvents, slab, show(parts), show(whole))
		}
		// The records' texts, per stream, and their line ends.
		var text [2][]byte
		var ends [2]int
		var open [2]bool
		for line := range bytes.Lines(data) {
			if !bytes.HasSuffix(line, []byte("\n")) && !flush {
				break
			}
			r, err := containerlog.Parse(format, bytes.TrimSuffix(line, []byte("\n")))
			if err != nil {
				continue
			}
			text[r.Stream] = append(text[r.Stream], r.Text...)
			open[r.Stream] = r.Partial
			if !r.Partial {
				ends[r.Stream]++
			}
		}
		var got [2][]byte
		var gotEnds [2]int
		for _, l := range whole {
			if len(l.body) > limit {
				t.Fatalf("event of %d bytes, limit %d", len(l.body), limit)
			}
			if l.bad != "" {
				continue
			}
			got[l.stream] = append(got[l.stream], l.body...)
			if l.piece == 0 || l.last {
				gotEnds[l.stream]++
			}
		}
		for s := range 2 {
			want := ends[s]
			if flush && open[s] {
				want++
			}
			if !bytes.Equal(got[s], text[s]) && !(open[s] && !flush && bytes.HasPrefix(text[s], got[s])) {
				t.Fatalf("stream %d: events hold %q, records %q", s, got[s], text[s])
			}
			if open[s] && !flush {
				continue
			}
			if gotEnds[s] != want {
				t.Fatalf("stream %d: %d line ends, records make %d", s, gotEnds[s], want)
			}
		}
	})
}

// BenchmarkCutRecords compares cutting CRI records (10 % of the lines in
// two pieces) with cutting the same bytes as plain lines, in reads of 256
// KiB, each cut whole into the events of the last (as readRecords does).
func BenchmarkCutRecords(b *testing.B) {
	data, lines := benchCRI(4 << 20)
	b.Run("cri", func(b *testing.B) {
		c := recCutter{format: containerlog.CRI, limit: DefaultMaxLineLength, slack: recordSlack}
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		var out []recLine
		for b.Loop() {
			pos, st := 0, recState{}
			for pos < len(data) {
				var n int
				out, n, st = c.cutAppend(out, data[pos:min(len(data), pos+256<<10)], st, false, math.MaxInt)
				if n == 0 && len(out) == 0 {
					b.Fatal("stuck")
				}
				pos += n
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
	})
	b.Run("plain", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			pos := 0
			for pos < len(data) {
				_, n, _ := splitLines(data[pos:min(len(data), pos+256<<10)], 1000, DefaultMaxLineLength, 0, false)
				pos += n
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
	})
}

// benchCRI writes about size bytes of CRI records of lines of 100 to 300
// bytes, one line in ten cut in two pieces, and returns them and the number
// of lines.
func benchCRI(size int) ([]byte, int) {
	r := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	lines := 0
	for b.Len() < size {
		n := 100 + r.IntN(200)
		text := strings.Repeat(string(rune('a'+lines%26)), n)
		ts := fmt.Sprintf("2024-05-01T10:%02d:%02d.%09dZ", lines/60%60, lines%60, r.IntN(1e9))
		if lines%10 == 0 {
			fmt.Fprintf(&b, "%s stdout P %s\n%s stdout F %s\n", ts, text[:n/2], ts, text[n/2:])
		} else {
			fmt.Fprintf(&b, "%s stdout F %s\n", ts, text)
		}
		lines++
	}
	if !utf8.Valid(b.Bytes()) {
		panic("bench data")
	}
	return b.Bytes(), lines
}
