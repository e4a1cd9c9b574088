package avrorpc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

// A client and a server that disagree on compression-type fail the
// connection with an error that says so, whichever end deflates, instead
// of "zlib: invalid header" or a frame count made of compressed bytes.
func TestCompressionMismatchSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		serverDeflate, deflt bool
		want                 string
	}{
		{"plain client, deflate server", true, false, "this end has compression-type = deflate and the other end does not compress"},
		{"deflate client, plain server", false, true, "the other end deflates its stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, results := serve(t, &Server{Handler: nopHandler{}, Deflate: tc.serverDeflate})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cl, err := Dial(ctx, addr, ClientConfig{Deflate: tc.deflt, RequestTimeout: 2 * time.Second})
			if err == nil {
				st, err := cl.AppendBatch(ctx, []event.Event{{Body: []byte("x")}})
				cl.Close()
				if err == nil && st == OK {
					t.Fatal("a call across a compression mismatch succeeded")
				}
			}
			select {
			case err := <-results:
				if !errors.Is(err, ErrCompressionMismatch) || !IsPeerError(err) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("server: %v, want the compression mismatch saying %q", err, tc.want)
				}
				t.Logf("server: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("the server did not end the connection")
			}
		})
	}
}

// A plain stream whose first byte arrives alone is checked all the same,
// and a plain stream is never taken for a deflated one.
func TestPlainCheckSplitReads(t *testing.T) {
	for _, tc := range []struct {
		chunks [][]byte
		bad    bool
	}{
		{[][]byte{{0x78}, {0x9c, 0, 0}}, true},
		{[][]byte{{0x78, 0x9c}}, true},
		{[][]byte{{0}, {0, 0, 1}}, false},
		{[][]byte{{0, 0, 0, 0, 0, 0, 0, 1}}, false},
	} {
		c := &plainCheck{src: &chunks{tc.chunks}}
		var err error
		for err == nil {
			_, err = c.Read(make([]byte, 16))
		}
		if got := errors.Is(err, ErrCompressionMismatch); got != tc.bad {
			t.Errorf("%x: mismatch %v (%v), want %v", tc.chunks, got, err, tc.bad)
		}
	}
}

type chunks struct{ c [][]byte }

func (r *chunks) Read(p []byte) (int, error) {
	if len(r.c) == 0 {
		return 0, errEOF
	}
	n := copy(p, r.c[0])
	r.c = r.c[1:]
	return n, nil
}

var errEOF = errors.New("end")
