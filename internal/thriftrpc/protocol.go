package thriftrpc

import (
	"fmt"
	"strings"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/thriftrpc/flume"
)

// Protocol is the Thrift protocol a connection speaks: Flume's protocol
// property.
type Protocol int

const (
	// Compact is TCompactProtocol, Flume's default.
	Compact Protocol = iota
	// Binary is TBinaryProtocol.
	Binary
)

func (p Protocol) String() string {
	if p == Binary {
		return "binary"
	}
	return "compact"
}

// ParseProtocol reads Flume's protocol property (compact or binary, any case).
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "compact", "":
		return Compact, nil
	case "binary":
		return Binary, nil
	}
	return Compact, fmt.Errorf("protocol %q is not compact or binary", s)
}

func (p Protocol) factory(cfg *thrift.TConfiguration) thrift.TProtocolFactory {
	if p == Binary {
		return thrift.NewTBinaryProtocolFactoryConf(cfg)
	}
	return thrift.NewTCompactProtocolFactoryConf(cfg)
}

// Status is the reply to a call.
type Status = flume.Status

// The Status values. Only OK means the server committed the events.
const (
	OK      = flume.Status_OK
	Failed  = flume.Status_FAILED
	Error   = flume.Status_ERROR
	Unknown = flume.Status_UNKNOWN
)

// Defaults.
const (
	// DefaultMaxFrameSize is Thrift's (and so Flume's) largest frame.
	DefaultMaxFrameSize = thrift.DEFAULT_MAX_FRAME_SIZE
	// DefaultMaxBatchEvents bounds the events of one appendBatch (and the
	// headers of one event), so a small frame cannot make the server
	// allocate millions of empty events.
	DefaultMaxBatchEvents = 100000
)

func init() {
	// The generated processor starts a goroutine per call that polls
	// whether the transport is still open, every 5 ms by default. Calls
	// here read from a frame already in memory, so the poll could never see
	// the connection close; connection state is handled by ServeConn.
	thrift.ServerConnectivityCheckInterval = 0
}

// toEvents converts received events; headers and bodies are not copied
// (the generated code allocated them for this call).
func toEvents(in []*flume.ThriftFlumeEvent, now int64) []event.Event {
	out := make([]event.Event, len(in))
	for i, e := range in {
		out[i] = event.Event{Headers: event.HeadersOf(e.Headers), Body: e.Body, ReceivedAt: now}
	}
	return out
}

// KerberosRefused is the config error for kerberos = true on the thrift
// source or sink: Kerberos would authenticate the peers, and running without
// the authentication a config asks for is not an option. (Flume's Thrift
// Kerberos is SASL GSSAPI with QOP auth over Thrift's TSaslTransport:
// authentication only, no GSS wrap of the data, so gokrb5 could carry it;
// sluice has no TSaslTransport yet, see docs/migrating-from-flume.md.)
const KerberosRefused = "Kerberos (SASL/GSSAPI) authentication of Thrift peers is not provided by sluice; " +
	"set kerberos = false and authenticate the peers with TLS client certificates instead (ssl, keystore and, on the source, truststore), " +
	"or keep a Flume agent for this hop"
