// Package grpcgzip is gRPC's "gzip" compressor made with
// klauspost/compress/gzip instead of the standard library's: the same
// format on the wire, about a sixth of the CPU to compress and less to
// decompress (docs/perf/otlp-bridge.md). gzip is the otlp sink's default
// compression and what OpenTelemetry SDKs send the otlp source.
//
// Importing the package replaces the compressor that
// google.golang.org/grpc/encoding/gzip registers, for every gRPC client
// and server of the process (gRPC looks compressors up by name); it imports
// that package itself, so that its registration is the one made last.
// grpc/encoding/gzip's SetLevel must not be called once it is replaced.
package grpcgzip

import (
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // initialised first: this package's registration replaces it
)

// Name is the compressor's name, as grpc.UseCompressor takes it.
const Name = "gzip"

func init() {
	encoding.RegisterCompressor(&compressor{})
}

// compressor keeps the writers and readers it made for the next calls: a
// gzip writer holds several hundred KiB of state.
type compressor struct {
	writers, readers sync.Pool
}

func (*compressor) Name() string { return Name }

// writer goes back to its pool when closed.
type writer struct {
	*gzip.Writer
	pool *sync.Pool
}

func (w *writer) Close() error {
	err := w.Writer.Close()
	w.pool.Put(w)
	return err
}

func (c *compressor) Compress(w io.Writer) (io.WriteCloser, error) {
	if z, ok := c.writers.Get().(*writer); ok {
		z.Reset(w)
		return z, nil
	}
	return &writer{Writer: gzip.NewWriter(w), pool: &c.writers}, nil
}

// reader goes back to its pool when gRPC closes it, once the message is
// read.
type reader struct {
	*gzip.Reader
	pool *sync.Pool
}

func (r *reader) Close() error {
	err := r.Reader.Close()
	r.pool.Put(r)
	return err
}

func (c *compressor) Decompress(r io.Reader) (io.Reader, error) {
	if z, ok := c.readers.Get().(*reader); ok {
		if err := z.Reset(r); err != nil {
			c.readers.Put(z)
			return nil, err
		}
		return z, nil
	}
	z, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	return &reader{Reader: z, pool: &c.readers}, nil
}
