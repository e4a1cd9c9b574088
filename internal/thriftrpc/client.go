package thriftrpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/panics"
	"github.com/sluicehq/sluice/internal/thriftrpc/flume"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// ClientConfig is how a Client connects and calls.
type ClientConfig struct {
	Protocol Protocol
	// ConnectTimeout bounds the TCP connection and the TLS handshake, as
	// Flume's connect-timeout. Default 20 s.
	ConnectTimeout time.Duration
	// RequestTimeout bounds each call, as Flume's request-timeout.
	// Default 20 s.
	RequestTimeout time.Duration
	// TLS, when set, wraps the connection in TLS.
	TLS *tls.Config
	// MaxFrameSize bounds a reply frame. Default DefaultMaxFrameSize.
	MaxFrameSize int
}

// Default client timeouts, Flume's.
const (
	DefaultConnectTimeout = 20 * time.Second
	DefaultRequestTimeout = 20 * time.Second
)

// Client is the client side of Flume's Thrift RPC on one connection, like
// Flume's ThriftRpcClient with a pool of one. It is not safe for concurrent
// use. After any error it is broken (every call returns that error) and must
// be closed and replaced: the connection state is unknown.
type Client struct {
	conn   net.Conn
	cfg    ClientConfig
	client *flume.ThriftSourceProtocolClient
	broken error

	batch []*flume.ThriftFlumeEvent
	evs   []flume.ThriftFlumeEvent
}

// Dial connects to addr (host:port).
func Dial(ctx context.Context, addr string, cfg ClientConfig) (*Client, error) {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	conn, err := tlsconf.Dial(dctx, addr, cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("thrift client: connect %s: %w", addr, err)
	}
	tcfg := &thrift.TConfiguration{
		MaxFrameSize:   int32(cfg.MaxFrameSize),
		MaxMessageSize: int32(cfg.MaxFrameSize),
		// Each read and write of a call gets the whole request timeout;
		// call bounds the call as a whole.
		SocketTimeout: cfg.RequestTimeout,
	}
	trans := thrift.NewTFramedTransportConf(thrift.NewTSocketFromConnConf(conn, tcfg), tcfg)
	proto := cfg.Protocol.factory(tcfg).GetProtocol(trans)
	return &Client{
		conn:   conn,
		cfg:    cfg,
		client: flume.NewThriftSourceProtocolClient(thrift.NewTStandardClient(proto, proto)),
	}, nil
}

// RemoteAddr is the server's address.
func (c *Client) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// Close closes the connection.
func (c *Client) Close() error {
	if c.broken == nil {
		c.broken = errors.New("thrift client: closed")
	}
	return c.conn.Close()
}

// AppendBatch sends events in one appendBatch call and returns the server's
// Status. Only OK means the server committed them.
func (c *Client) AppendBatch(ctx context.Context, events []event.Event) (Status, error) {
	c.evs = c.evs[:0]
	for _, e := range events {
		c.evs = append(c.evs, flume.ThriftFlumeEvent{Headers: orEmptyMap(e.Headers), Body: nonNil(e.Body)})
	}
	c.batch = c.batch[:0]
	for i := range c.evs {
		c.batch = append(c.batch, &c.evs[i])
	}
	st, err := c.call(ctx, "appendBatch", func(ctx context.Context) (Status, error) {
		return c.client.AppendBatch(ctx, c.batch)
	})
	clear(c.evs) // do not keep bodies alive until the next batch
	return st, err
}

// Append sends one event in an append call.
func (c *Client) Append(ctx context.Context, e event.Event) (Status, error) {
	te := &flume.ThriftFlumeEvent{Headers: orEmptyMap(e.Headers), Body: nonNil(e.Body)}
	return c.call(ctx, "append", func(ctx context.Context) (Status, error) {
		return c.client.Append(ctx, te)
	})
}

// nonNil returns b, or an empty slice for nil: body is a required field,
// and some peers tell a missing binary from an empty one.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (c *Client) call(ctx context.Context, name string, f func(context.Context) (Status, error)) (st Status, err error) {
	if c.broken != nil {
		return Unknown, c.broken
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	// The library's socket reads do not watch ctx: closing the connection
	// ends a call that outlives its deadline or its caller.
	stop := panics.AfterFunc(ctx, "thrift client: call deadline", func() { _ = c.conn.Close() })
	st, err = f(ctx)
	if !stop() && err == nil {
		// The reply came, but the connection was closed at the deadline.
		c.broken = fmt.Errorf("thrift client: connection to %s closed: %w", c.conn.RemoteAddr(), ctx.Err())
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		c.broken = fmt.Errorf("thrift client: %s to %s: %w", name, c.conn.RemoteAddr(), err)
		return Unknown, c.broken
	}
	return st, nil
}

// orEmptyMap returns h as the map the generated code sends: headers is a
// required field, so an event without headers sends an empty map.
func orEmptyMap(h event.Headers) map[string]string {
	if m := h.Map(); m != nil {
		return m
	}
	return map[string]string{}
}
