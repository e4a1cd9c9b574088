package avrorpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// ClientConfig is how a Client connects and calls.
type ClientConfig struct {
	// ConnectTimeout bounds the TCP (and TLS) connection and the first call,
	// which carries the handshake, as Flume's connect-timeout does.
	// Default 20 s.
	ConnectTimeout time.Duration
	// RequestTimeout bounds each later call. Default 20 s.
	RequestTimeout time.Duration
	// Deflate compresses the stream both ways with zlib at DeflateLevel
	// (1-9, default 6), as Flume's compression-type = deflate.
	Deflate      bool
	DeflateLevel int
	// TLS, when set, wraps the connection in TLS (zlib runs inside TLS).
	TLS *tls.Config
	// Limits bound the replies the client reads.
	Limits Limits
}

// Default client timeouts, Flume's.
const (
	DefaultConnectTimeout = 20 * time.Second
	DefaultRequestTimeout = 20 * time.Second
)

// Client is the client side of Flume's Avro RPC on one connection, like
// Flume's NettyAvroRpcClient: it handshakes on its first call and then calls
// without handshake. A Client is not safe for concurrent use. After any
// error it is broken (every call returns that error) and must be closed and
// replaced: the connection state is unknown.
type Client struct {
	conn net.Conn
	st   *stream
	cfg  ClientConfig

	serial       int32
	done         bool // handshake succeeded
	serverHash   MD5  // last learned server hash (ours until told)
	sendProtocol bool // the server answered NONE: send our protocol text
	broken       error

	msg, pack []byte
}

// Dial connects to addr (host:port).
func Dial(ctx context.Context, addr string, cfg ClientConfig) (*Client, error) {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.DeflateLevel == 0 {
		cfg.DeflateLevel = 6
	}
	if cfg.DeflateLevel < 1 || cfg.DeflateLevel > 9 {
		return nil, fmt.Errorf("avro client: deflate level %d is not from 1 to 9", cfg.DeflateLevel)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	conn, err := tlsconf.Dial(dctx, addr, cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("avro client: connect %s: %w", addr, err)
	}
	return &Client{
		conn:       conn,
		st:         newStream(conn, cfg.Deflate, cfg.DeflateLevel, 0),
		cfg:        cfg,
		serverHash: ProtocolHash,
	}, nil
}

// RemoteAddr is the server's address.
func (c *Client) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// Close closes the connection.
func (c *Client) Close() error {
	if c.broken == nil {
		c.broken = errors.New("avro client: closed")
	}
	return c.conn.Close()
}

// AppendBatch sends events in one appendBatch call and returns the server's
// Status. Only OK means the server committed them.
func (c *Client) AppendBatch(ctx context.Context, events []event.Event) (Status, error) {
	return c.call(ctx, msgAppendBatch, func(b []byte) []byte { return appendEvents(b, events) })
}

// Append sends one event in an append call.
func (c *Client) Append(ctx context.Context, e event.Event) (Status, error) {
	return c.call(ctx, msgAppend, func(b []byte) []byte { return appendEvent(b, &e) })
}

// Ping performs the handshake if it has not happened yet (a call with an
// empty message name), so a connection can be checked before events are
// sent. After the handshake it is a no-op.
func (c *Client) Ping(ctx context.Context) error {
	if c.done {
		return c.broken
	}
	_, err := c.call(ctx, "", nil)
	return err
}

func (c *Client) call(ctx context.Context, name string, params func([]byte) []byte) (st Status, err error) {
	if c.broken != nil {
		return Unknown, c.broken
	}
	defer func() {
		if err != nil {
			c.broken = err
		}
	}()
	timeout := c.cfg.RequestTimeout
	if !c.done {
		timeout = max(timeout, c.cfg.ConnectTimeout)
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.conn.SetWriteDeadline(deadline)
	c.st.setDeadline(deadline)
	stop := panics.AfterFunc(ctx, "avro client: call deadline", c.st.stop)
	defer stop()

	for attempt := 0; ; attempt++ {
		c.msg = c.msg[:0]
		if !c.done {
			hr := handshakeRequest{clientHash: ProtocolHash, serverHash: c.serverHash}
			if c.sendProtocol {
				hr.clientProtocol = &serverProtocol
			}
			c.msg = appendHandshakeRequest(c.msg, hr)
		}
		c.msg = append(c.msg, 0) // empty call metadata
		c.msg = appendString(c.msg, name)
		if params != nil {
			c.msg = params(c.msg)
		}
		c.serial++
		c.pack = appendPack(c.pack[:0], c.serial, c.msg)
		if err := c.st.writePack(c.pack, 0); err != nil {
			return Unknown, c.ctxErr(ctx, fmt.Errorf("avro client: %s: write: %w", name, err))
		}
		p, err := readPack(c.st.r, c.cfg.Limits, nil)
		if err != nil {
			return Unknown, c.ctxErr(ctx, fmt.Errorf("avro client: %s: read reply: %w", name, unexpected(err)))
		}
		if p.serial != c.serial {
			return Unknown, fmt.Errorf("avro client: %s: reply serial %d to request %d", name, p.serial, c.serial)
		}
		d := decoder{buf: p.msg, budget: c.cfg.Limits.decodeBudget()}
		if !c.done {
			again, err := c.handshakeReply(&d)
			if err != nil {
				return Unknown, fmt.Errorf("avro client: handshake with %s: %w", c.conn.RemoteAddr(), err)
			}
			if again {
				if attempt > 0 {
					return Unknown, fmt.Errorf("avro client: handshake with %s: server does not accept the protocol %s", c.conn.RemoteAddr(), ProtocolHash)
				}
				continue
			}
		}
		if name == "" {
			return OK, nil
		}
		st, err := replyStatus(&d)
		if err != nil {
			return Unknown, fmt.Errorf("avro client: %s: %w", name, err)
		}
		return st, nil
	}
}

func (c *Client) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// handshakeReply reads a HandshakeResponse and reports whether the request
// must be sent again with the protocol text (match NONE).
func (c *Client) handshakeReply(d *decoder) (again bool, err error) {
	r, err := d.handshakeResponse()
	if err != nil {
		return false, err
	}
	if r.serverProtocol != nil {
		if err := checkRemoteProtocol(*r.serverProtocol); err != nil {
			return false, fmt.Errorf("server protocol: %w", err)
		}
	}
	if r.serverHash != nil {
		c.serverHash = *r.serverHash
	}
	switch r.match {
	case MatchNone:
		// Whatever follows a NONE (avsc's server sends an error response
		// there, Java's sends nothing) answers a call the server could not
		// read; Java's Requestor ignores it and resends with its protocol
		// text, and so does this client.
		c.sendProtocol = true
		return true, nil
	case MatchClient:
		if r.serverProtocol == nil || r.serverHash == nil {
			return false, malformed("CLIENT handshake response without the server protocol")
		}
	}
	c.done = true
	return false, nil
}

// replyStatus reads a call response: metadata, error flag, then the Status
// or the error string.
func replyStatus(d *decoder) (Status, error) {
	if err := d.skipBytesMap(); err != nil {
		return Unknown, fmt.Errorf("response metadata: %w", err)
	}
	isErr, err := d.boolean()
	if err != nil {
		return Unknown, err
	}
	if isErr {
		idx, err := d.long()
		if err != nil {
			return Unknown, err
		}
		if idx != 0 {
			return Unknown, malformed("error union index %d", idx)
		}
		msg, err := d.str()
		if err != nil {
			return Unknown, err
		}
		return Unknown, fmt.Errorf("server error: %s", truncate(msg, 512))
	}
	s, err := d.long()
	if err != nil {
		return Unknown, err
	}
	if s < 0 || s > int64(Unknown) {
		return Unknown, malformed("status %d", s)
	}
	if d.remaining() != 0 {
		return Unknown, malformed("%d bytes after the status", d.remaining())
	}
	return Status(s), nil
}
