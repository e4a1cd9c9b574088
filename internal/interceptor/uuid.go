package interceptor

import (
	"crypto/rand"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// UUID sets a header (id) to a prefix and a random (version 4) UUID, as
// Flume's org.apache.flume.sink.solr.morphline.UUIDInterceptor.
type UUID struct {
	header   string
	preserve bool
	prefix   string
}

// NewUUID builds a UUID interceptor from headerName (id), preserveExisting
// (true) and prefix ("").
func NewUUID(_ flow.Env, p *config.Props) (flow.Interceptor, error) {
	return &UUID{
		header:   p.String("headerName", "id"),
		preserve: p.Bool("preserveExisting", true),
		prefix:   p.String("prefix", ""),
	}, nil
}

// uuidChunk is how many UUIDs' worth of random bytes are read at once.
const uuidChunk = 64

// Intercept sets the header on every event, keeping an existing value when
// preserveExisting is set.
func (u *UUID) Intercept(events []event.Event) []event.Event {
	var buf []byte
	off := 0
	for i := range events {
		e := &events[i]
		if u.preserve {
			if _, ok := e.Headers.Get(u.header); ok {
				continue
			}
		}
		if off == len(buf) {
			if buf == nil {
				buf = make([]byte, 16*min(len(events)-i, uuidChunk))
			}
			rand.Read(buf) // never fails (crypto/rand crashes the program instead)
			off = 0
		}
		e.SetHeader(u.header, u.format(buf[off:off+16]))
		off += 16
	}
	return events
}

// format returns prefix followed by the version 4 UUID made of the 16 bytes
// b, in the canonical lower-case 8-4-4-4-12 form Java's UUID.toString uses.
func (u *UUID) format(b []byte) string {
	const hexDigits = "0123456789abcdef"
	var buf [64]byte
	out := append(buf[:0], u.prefix...)
	for i, c := range b[:16] {
		switch i {
		case 4, 6, 8, 10:
			out = append(out, '-')
		}
		switch i {
		case 6:
			c = c&0x0f | 0x40 // version 4
		case 8:
			c = c&0x3f | 0x80 // RFC 4122 variant
		}
		out = append(out, hexDigits[c>>4], hexDigits[c&0x0f])
	}
	return string(out)
}
