package netcatsource

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/source/sourcetest"
)

// BenchmarkNetcat sends b.N lines of 256 bytes (newline included) over 4
// connections into a memory channel that a goroutine drains, and reports
// lines per second end to end.
func BenchmarkNetcat(b *testing.B) {
	for _, bc := range []struct {
		name  string
		props map[string]string
	}{
		{"ack", nil},
		{"noack", map[string]string{"ack-every-event": "false"}},
		{"ack/batch1000", map[string]string{"batchSize": "1000"}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchNetcat(b, 4, bc.props) })
	}
}

func benchNetcat(b *testing.B, conns int, props map[string]string) {
	const lineLen = 256
	pl := sourcetest.NewPipeline(b, 100000, 1000, 3*time.Second)
	s := newTCP(b, props)
	start(b, s, pl.Processor)

	// 256 lines of 256 bytes: one 64 KiB write.
	var chunk bytes.Buffer
	for i := range 256 {
		l := strconv.Itoa(i) + " "
		chunk.WriteString(l)
		chunk.Write(bytes.Repeat([]byte("x"), lineLen-1-len(l)))
		chunk.WriteByte('\n')
	}
	perChunk := 256

	total := b.N
	drained := make(chan int)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		n := 0
		buf := make([]event.Event, 0, 1000)
		for n < total && ctx.Err() == nil {
			tx := pl.Channel.Begin()
			got, err := tx.Take(ctx, buf[:0], 1000)
			if err != nil {
				tx.Rollback()
				break
			}
			if err := tx.Commit(context.Background()); err != nil {
				break
			}
			n += len(got)
			clear(got)
		}
		drained <- n
	}()

	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = dial(b, s.Addr())
	}
	b.SetBytes(lineLen)
	b.ReportAllocs()
	b.ResetTimer()
	begin := time.Now()
	var wg sync.WaitGroup
	for i, c := range cs {
		n := total / conns
		if i < total%conns {
			n++
		}
		wg.Add(2)
		go func() { // acknowledgements
			defer wg.Done()
			io.Copy(io.Discard, c)
		}()
		go func() {
			defer wg.Done()
			data := chunk.Bytes()
			for n >= perChunk {
				if _, err := c.Write(data); err != nil {
					b.Error(err)
					return
				}
				n -= perChunk
			}
			c.Write(data[:n*lineLen])
			c.(*net.TCPConn).CloseWrite()
		}()
	}
	got := <-drained
	elapsed := time.Since(begin)
	b.StopTimer()
	if got != total {
		b.Fatalf("drained %d lines, want %d", got, total)
	}
	for _, c := range cs {
		c.Close()
	}
	wg.Wait()
	b.ReportMetric(float64(total)/elapsed.Seconds(), "lines/s")
}
