package flow

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// chunkReader returns one chunk per Read, as a socket returns what arrived.
type chunkReader struct{ chunks []string }

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	if n < len(r.chunks[0]) {
		r.chunks[0] = r.chunks[0][n:]
	} else {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

// step is one expected Next result: its lines, or an error.
type step struct {
	lines   []string
	tooLong bool
	eof     bool
}

func TestLineBatcher(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		opt    LineOptions
		want   []step
	}{
		{"lone line goes at once", []string{"a\n", "b\n"}, LineOptions{},
			[]step{{lines: []string{"a"}}, {lines: []string{"b"}}, {eof: true}}},
		{"buffered lines batch together", []string{"a\nb\nc\n", "d\n"}, LineOptions{},
			[]step{{lines: []string{"a", "b", "c"}}, {lines: []string{"d"}}, {eof: true}}},
		{"cut at batch size", []string{"1\n2\n3\n4\n5\n"}, LineOptions{BatchSize: 2},
			[]step{{lines: []string{"1", "2"}}, {lines: []string{"3", "4"}}, {lines: []string{"5"}}, {eof: true}}},
		{"partial line waits for its end", []string{"a\nb", "c\nd", "\n"}, LineOptions{},
			[]step{{lines: []string{"a"}}, {lines: []string{"bc"}}, {lines: []string{"d"}}, {eof: true}}},
		{"unterminated last line", []string{"a\nlast"}, LineOptions{},
			[]step{{lines: []string{"a"}}, {lines: []string{"last"}}, {eof: true}, {eof: true}}},
		{"empty lines are lines", []string{"\n\nx\n"}, LineOptions{},
			[]step{{lines: []string{"", "", "x"}}, {eof: true}}},
		{"crlf kept", []string{"a\r\n"}, LineOptions{},
			[]step{{lines: []string{"a\r"}}, {eof: true}}},
		{"crlf trimmed", []string{"a\r\nb\r", "\n\r\n"}, LineOptions{TrimCR: true},
			[]step{{lines: []string{"a"}}, {lines: []string{"b", ""}}, {eof: true}}},
		{"max length counts the newline", []string{"abcd\nabcde\nxy\n"}, LineOptions{MaxLineLength: 5},
			[]step{{lines: []string{"abcd"}}, {tooLong: true}, {lines: []string{"xy"}}, {eof: true}}},
		{"too long first, unterminated so far", []string{"abcdefgh", "ij\nok\n"}, LineOptions{MaxLineLength: 5},
			[]step{{tooLong: true}, {lines: []string{"ok"}}, {eof: true}}},
		{"too long at end of input", []string{"ok\nabcdefgh"}, LineOptions{MaxLineLength: 5},
			[]step{{lines: []string{"ok"}}, {tooLong: true}, {eof: true}}},
		{"line longer than the buffer", []string{strings.Repeat("x", 40) + "\nshort\n"}, LineOptions{BufferSize: 16},
			[]step{{lines: []string{strings.Repeat("x", 40), "short"}}, {eof: true}}},
		{"long line with crlf split at the buffer", []string{strings.Repeat("x", 15) + "\r", "\nz\n"}, LineOptions{BufferSize: 16, TrimCR: true},
			[]step{{lines: []string{strings.Repeat("x", 15), "z"}}, {eof: true}}},
		{"max longer than the buffer", []string{strings.Repeat("x", 30) + "\n" + strings.Repeat("y", 50) + "\nz\n"}, LineOptions{BufferSize: 16, MaxLineLength: 40},
			[]step{{lines: []string{strings.Repeat("x", 30)}}, {tooLong: true}, {lines: []string{"z"}}, {eof: true}}},
		{"empty input", nil, LineOptions{}, []step{{eof: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewLineBatcher(&chunkReader{chunks: append([]string(nil), tc.chunks...)}, tc.opt)
			var dst [][]byte
			for i, w := range tc.want {
				var err error
				dst, err = b.Next(dst)
				var tl *LineTooLongError
				switch {
				case w.eof:
					if !errors.Is(err, io.EOF) || len(dst) != 0 {
						t.Fatalf("step %d: got %q, %v; want EOF", i, dst, err)
					}
				case w.tooLong:
					if !errors.As(err, &tl) || tl.Max != tc.opt.MaxLineLength || len(dst) != 0 {
						t.Fatalf("step %d: got %q, %v; want LineTooLongError", i, dst, err)
					}
				default:
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					got := make([]string, len(dst))
					for j := range dst {
						got[j] = string(dst[j])
					}
					if strings.Join(got, "|") != strings.Join(w.lines, "|") || len(got) != len(w.lines) {
						t.Fatalf("step %d: got %q, want %q", i, got, w.lines)
					}
				}
			}
		})
	}
}

func TestLineTooLongMessage(t *testing.T) {
	// netcat answers "FAILED: " + this.
	want := "line exceeds the maximum length (512 chars, including newline)"
	if got := (&LineTooLongError{Max: 512}).Error(); got != want {
		t.Fatalf("got %q", got)
	}
}

func TestLineBatcherBodiesOutliveNext(t *testing.T) {
	b := NewLineBatcher(&chunkReader{chunks: []string{"first\nsecond\n", "third\n"}}, LineOptions{BufferSize: 16})
	one, err := b.Next(nil)
	if err != nil {
		t.Fatal(err)
	}
	keep := one[0]
	if _, err := b.Next(nil); err != nil {
		t.Fatal(err)
	}
	if string(keep) != "first" || string(one[1]) != "second" {
		t.Fatalf("bodies changed: %q %q", keep, one[1])
	}
	grown := append(one[0], 'X')
	if string(one[1]) != "second" || string(grown) != "firstX" {
		t.Fatalf("append to a body clobbered its neighbour: %q", one[1])
	}
}

func TestLineBatcherTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	b := NewLineBatcher(server, LineOptions{BatchSize: 1000})

	// A lone line comes back without waiting for more.
	if _, err := client.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	got, err := b.Next(nil)
	if err != nil || len(got) != 1 || string(got[0]) != "hello" {
		t.Fatalf("got %q, %v", got, err)
	}
	// A burst arrives in few batches.
	var burst bytes.Buffer
	for range 5000 {
		burst.WriteString("0123456789abcdef\n")
	}
	go func() { _, _ = client.Write(burst.Bytes()); _ = client.Close() }()
	lines, batches := 0, 0
	for {
		got, err = b.Next(got)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		lines += len(got)
		batches++
	}
	if lines != 5000 {
		t.Fatalf("read %d lines, want 5000", lines)
	}
	if batches > 100 {
		t.Fatalf("5000 buffered lines came in %d batches; batching is not working", batches)
	}
}

func TestLineBatcherDuration(t *testing.T) {
	// The duration cut is checked every 64 lines; with a zero-length
	// duration the batch stops at the first check.
	input := strings.Repeat("x\n", 1000)
	b := NewLineBatcher(strings.NewReader(input), LineOptions{BatchSize: 1000, BatchDuration: time.Nanosecond})
	got, err := b.Next(nil)
	if err != nil || len(got) != 64 {
		t.Fatalf("got %d lines, %v; want 64", len(got), err)
	}
}

func FuzzLineBatcher(f *testing.F) {
	f.Add([]byte("a\nb\r\nccc\n"), uint8(3), uint8(0), uint8(16))
	f.Add([]byte("long line here\nx"), uint8(1), uint8(6), uint8(16))
	f.Add([]byte("\n\n\n"), uint8(2), uint8(1), uint8(255))
	f.Fuzz(func(t *testing.T, data []byte, chunk, max, bufSize uint8) {
		var chunks []string
		step := int(chunk%7) + 1
		for i := 0; i < len(data); i += step {
			chunks = append(chunks, string(data[i:min(i+step, len(data))]))
		}
		b := NewLineBatcher(&chunkReader{chunks: chunks}, LineOptions{BatchSize: 3, MaxLineLength: int(max), BufferSize: int(bufSize)})
		var out bytes.Buffer
		var dst [][]byte
		for range len(data) + 2 {
			var err error
			dst, err = b.Next(dst)
			var tl *LineTooLongError
			if errors.As(err, &tl) {
				out.WriteString("<long>\n")
				continue
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(dst) == 0 || len(dst) > 3 {
				t.Fatalf("batch of %d lines", len(dst))
			}
			for _, l := range dst {
				if max > 0 && len(l)+1 > int(max) {
					t.Fatalf("line of %d bytes with max %d", len(l), max)
				}
				out.Write(l)
				out.WriteByte('\n')
			}
		}
		if max != 0 {
			return
		}
		want := string(data)
		if len(want) > 0 && !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		if out.String() != want {
			t.Fatalf("lines do not rebuild the input: got %q, want %q", out.String(), want)
		}
	})
}
