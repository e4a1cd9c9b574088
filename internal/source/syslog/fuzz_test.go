package syslogsource

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// seeds returns the golden inputs plus what real senders send.
func seeds(f *testing.F) [][]byte {
	file, err := os.Open("testdata/flume_cases.txt")
	if err != nil {
		f.Fatal(err)
	}
	defer file.Close()
	var out [][]byte
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		q, err := strconv.Unquote(strings.SplitN(l, " ", 4)[3])
		if err == nil {
			out = append(out, []byte(q))
		}
	}
	return append(out,
		[]byte("<13>1 2026-12-02T13:06:07.753588+00:00 vm mytag - - [timeQuality tzKnown=\"1\" isSynced=\"0\"] hello 5424\n"),
		[]byte("97 <13>1 2026-12-02T13:06:07.814880+00:00 vm t3 - - [timeQuality tzKnown=\"1\" isSynced=\"0\"] hello oct"),
		[]byte("53 <13>1 2026-12-02T13:25:37.966126+00:00 vm t3 - - - l153 <13>1 2026-12-02T13:25:37.966349+00:00 vm t3 - - - l2"),
		[]byte("999999999 <13>x"), []byte("9999999999 <13>x\n"), []byte("5 <1>ab"), []byte("0 <1>\n"),
	)
}

var fuzzNow = func() time.Time { return goldenNow }

// FuzzFlumeParser feeds arbitrary bytes to the syslogtcp/syslogudp parser
// (SyslogUtils' RFC 5424 and RFC 3164 formats): it must not panic, must
// consume input, must never make a message longer than eventSize, and must
// tag exactly the bad messages.
func FuzzFlumeParser(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s, uint16(2500), uint8(0))
		f.Add(s, uint16(12), uint8(KeepAll))
	}
	f.Fuzz(func(t *testing.T, data []byte, size uint16, keep uint8) {
		maxSize := max(int(size), minEventSize)
		p := &FlumeParser{Keep: Keep(keep) & (KeepAll<<1 - 1), Loc: time.UTC, Now: fuzzNow}
		rest := data
		for len(rest) > 0 {
			m, n, ok := ScanStream(rest, maxSize)
			if n < 0 || n > len(rest) {
				t.Fatalf("consumed %d of %d", n, len(rest))
			}
			if !ok {
				break
			}
			if n == 0 {
				t.Fatal("a message consumed nothing")
			}
			rest = rest[n:]
			if len(m.Raw) > maxSize || (m.Incomplete && len(m.Raw) != maxSize) {
				t.Fatalf("message of %d bytes with eventSize %d (incomplete %v)", len(m.Raw), maxSize, m.Incomplete)
			}
			checkFlumeEvent(t, p, m)
		}
		if m, ok := ScanDatagram(data, true); ok {
			checkFlumeEvent(t, p, m)
		}
	})
}

func checkFlumeEvent(t *testing.T, p *FlumeParser, m Message) {
	e, _ := p.Event(m, nil)
	if e.Body == nil && len(m.Raw) > 0 {
		t.Fatal("nil body")
	}
	st := e.Headers.Value(HeaderStatus)
	switch {
	case m.Bad && st != StatusInvalid, !m.Bad && m.Incomplete && st != StatusIncomplete, !m.Bad && !m.Incomplete && st != "":
		t.Fatalf("status %q for bad=%v incomplete=%v", st, m.Bad, m.Incomplete)
	}
	if e.Headers.Value(HeaderFacility) == "" || e.Headers.Value(HeaderSeverity) == "" {
		t.Fatalf("headers %v", e.Headers)
	}
	if ts, ok := e.Headers.Get("timestamp"); ok {
		if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
			t.Fatalf("timestamp %q", ts)
		}
	}
	// The body is the message, or text Java re-encoded: valid UTF-8 unless raw.
	if !bytes.Equal(e.Body, m.Raw) && !utf8.Valid(e.Body) {
		t.Fatalf("re-encoded body is not valid UTF-8: %q", e.Body)
	}
}

// FuzzMultiportParser feeds arbitrary lines to the multiport_syslogtcp
// parser (SyslogParser): it must not panic, and a line it refuses must come
// back whole, tagged Invalid.
func FuzzMultiportParser(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(bytes.TrimSuffix(s, []byte("\n")), uint8(0), uint8(0))
	}
	f.Fuzz(func(t *testing.T, line []byte, cs, keep uint8) {
		p := &MultiportParser{Keep: Keep(keep) & (KeepAll<<1 - 1), Now: fuzzNow}
		e, _, readFail := p.Event(line, Charset(cs%3), false, nil)
		if readFail {
			if e.Headers.Value(HeaderStatus) != StatusInvalid || !bytes.Equal(e.Body, line) {
				t.Fatalf("refused line: headers %v body %q", e.Headers, e.Body)
			}
			return
		}
		for _, k := range []string{HeaderPriority, HeaderFacility, HeaderSeverity, "timestamp", "host"} {
			if _, ok := e.Headers.Get(k); !ok {
				t.Fatalf("parsed line lacks %s: %v", k, e.Headers)
			}
		}
	})
}

// FuzzFramer checks the TCP framer (newline and RFC 6587 octet counting):
// frames never exceed eventSize whatever a count claims, and the frames do
// not depend on how the stream was cut into reads.
func FuzzFramer(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s, uint16(64), uint16(7), true)
		f.Add(s, uint16(2500), uint16(1), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, size, cut uint16, flume bool) {
		fr := framer{maxSize: max(int(size)%4096, minEventSize), octet: true, flume: flume}
		whole := frameAll(t, fr, data, len(data))
		split := frameAll(t, fr, data, int(cut)%(len(data)+1))
		if whole != split {
			t.Fatalf("frames depend on the read boundary at %d:\nwhole: %s\nsplit: %s", int(cut)%(len(data)+1), whole, split)
		}
	})
}

// frameAll frames data delivered in two reads (cut at cut) the way a
// connection does, and describes the frames.
func frameAll(t *testing.T, fr framer, data []byte, cut int) string {
	var out strings.Builder
	var buf []byte
	skip := 0
	feed := func(chunk []byte, eof bool) {
		buf = append(buf, chunk...)
		for {
			if skip > 0 {
				d := min(skip, len(buf))
				buf, skip = buf[d:], skip-d
			}
			if len(buf) == 0 {
				return
			}
			f, n, sk, ok := fr.next(buf, eof)
			if n < 0 || n > len(buf) {
				t.Fatalf("consumed %d of %d", n, len(buf))
			}
			buf = buf[n:]
			if !ok {
				if eof && len(buf) > 0 {
					t.Fatalf("%d bytes left at the end", len(buf))
				}
				return
			}
			if len(f.line) > fr.maxSize || len(f.msg.Raw) > fr.maxSize {
				t.Fatalf("frame longer than eventSize %d", fr.maxSize)
			}
			fmt.Fprintf(&out, "[%q %q %v %v %v %v]", f.line, f.msg.Raw, f.valid, f.incomplete, f.truncated, f.msg.Bad)
			skip = sk
		}
	}
	feed(data[:cut], false)
	feed(data[cut:], true)
	return out.String()
}
