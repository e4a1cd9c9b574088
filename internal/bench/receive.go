package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/internal/avrorpc"
	"github.com/sluicehq/sluice/internal/event"
)

// ListenAvro starts a receiver that speaks the server side of Flume's Avro
// RPC on addr, as the downstream of an avro sink: every event of every
// append and appendBatch call is recorded by its body, and each call is
// answered OK.
func ListenAvro(addr string) (*Receiver, error) {
	return listen(addr, "avro", func(r *Receiver, c net.Conn) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-r.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		srv := avrorpc.Server{Handler: avroHandler{r}}
		_ = srv.ServeConn(ctx, c)
	})
}

type avroHandler struct{ r *Receiver }

func (h avroHandler) Append(_ context.Context, e event.Event) avrorpc.Status {
	h.r.Record(e.Body)
	return avrorpc.OK
}

func (h avroHandler) AppendBatch(_ context.Context, events []event.Event) avrorpc.Status {
	now := time.Now().UnixNano()
	for i := range events {
		h.r.RecordAt(events[i].Body, now)
	}
	return avrorpc.OK
}

// DefaultDirPoll is how often WatchDir looks for new lines: the latency it
// reports includes up to this much of its own.
const DefaultDirPoll = 2 * time.Millisecond

// WatchDir starts a receiver that reads the files of dir (such as a
// file_roll sink's directory) as they grow, every poll, and records each
// complete line. Files are read from their start, so dir should be empty
// (or hold only this run's files) when the run begins.
func WatchDir(dir string, poll time.Duration) (*Receiver, error) {
	if poll <= 0 {
		poll = DefaultDirPoll
	}
	if _, err := os.ReadDir(dir); err != nil {
		return nil, fmt.Errorf("bench dir receiver: %w", err)
	}
	r := NewReceiver()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		files := map[string]*tailed{}
		defer func() {
			for _, f := range files {
				_ = f.f.Close() // read only
			}
		}()
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			scanDir(r, dir, files)
			select {
			case <-r.stop:
				scanDir(r, dir, files)
				return
			case <-t.C:
			}
		}
	}()
	return r, nil
}

// tailed is a file being read as it grows; partial holds a line not yet
// ended.
type tailed struct {
	f       *os.File
	partial []byte
}

func scanDir(r *Receiver, dir string, files map[string]*tailed) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	buf := make([]byte, 256<<10)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		name := filepath.Join(dir, e.Name())
		t := files[name]
		if t == nil {
			f, err := os.Open(name)
			if err != nil {
				continue
			}
			t = &tailed{f: f}
			files[name] = t
		}
		for {
			n, err := t.f.Read(buf)
			if n > 0 {
				now := time.Now().UnixNano()
				data := buf[:n]
				for {
					i := bytes.IndexByte(data, '\n')
					if i < 0 {
						t.partial = append(t.partial, data...)
						break
					}
					line := data[:i]
					if len(t.partial) > 0 {
						line = append(t.partial, line...)
						t.partial = t.partial[:0]
					}
					r.RecordAt(line, now)
					data = data[i+1:]
				}
			}
			if err != nil || n == 0 {
				if err != nil && !errors.Is(err, io.EOF) {
					r.rec.malformed()
				}
				break
			}
		}
	}
}
