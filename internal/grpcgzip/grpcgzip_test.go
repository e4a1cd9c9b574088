package grpcgzip

import (
	"bytes"
	stdgzip "compress/gzip"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/encoding"
)

// TestReplacesGRPCGzip: gRPC's registry hands out this compressor under
// gzip's name, though grpc/encoding/gzip registered its own.
func TestReplacesGRPCGzip(t *testing.T) {
	if _, ok := encoding.GetCompressor("gzip").(*compressor); !ok {
		t.Fatalf("gRPC's gzip compressor is %T, not this package's", encoding.GetCompressor("gzip"))
	}
}

func compress(t *testing.T, c encoding.Compressor, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := c.Compress(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func decompress(t *testing.T, c encoding.Compressor, data []byte) ([]byte, error) {
	t.Helper()
	r, err := c.Decompress(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(r)
	if cl, ok := r.(io.Closer); ok {
		cl.Close()
	}
	return out, err
}

// TestStandardGzip: what the compressor writes, the standard library
// reads, and what the standard library writes (as gRPC's own gzip
// compressor and other peers do), the compressor reads; over and over, so
// that pooled writers and readers are reused.
func TestStandardGzip(t *testing.T) {
	c := encoding.GetCompressor(Name)
	for i := range 20 {
		data := []byte(strings.Repeat(fmt.Sprintf("record %d: some log text, ", i), i*100))
		zr, err := stdgzip.NewReader(bytes.NewReader(compress(t, c, data)))
		if err != nil {
			t.Fatalf("round %d: the standard library cannot read it: %v", i, err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round %d: the standard library read %d bytes (%v), want %d", i, len(got), err, len(data))
		}

		var buf bytes.Buffer
		zw := stdgzip.NewWriter(&buf)
		zw.Write(data)
		zw.Close()
		got, err = decompress(t, c, buf.Bytes())
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round %d: read %d bytes of the standard library's gzip (%v), want %d", i, len(got), err, len(data))
		}
	}
}

// TestBadInput: bytes that are not gzip are an error, and the reader that
// found it serves the next message.
func TestBadInput(t *testing.T) {
	c := encoding.GetCompressor(Name)
	for _, bad := range [][]byte{[]byte("not gzip at all"), compress(t, c, []byte("cut short"))[:12]} {
		if _, err := decompress(t, c, bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
		if got, err := decompress(t, c, compress(t, c, []byte("fine"))); err != nil || string(got) != "fine" {
			t.Errorf("after %q: %q, %v", bad, got, err)
		}
	}
}
