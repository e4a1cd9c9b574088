package sourcetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/sluicehq/sluice/internal/event"
)

// Events returns events with bodies, without headers.
func Events(bodies []string) []event.Event {
	events := make([]event.Event, len(bodies))
	for i, b := range bodies {
		events[i] = event.Event{Body: []byte(b)}
	}
	return events
}

// HTTPSession is a sender that posts each batch, as encode makes its body,
// to url over one keep-alive connection, and takes 200 for an
// acknowledgement; another answer is an error with the status and body.
func HTTPSession(url, contentType string, encode func(bodies []string) ([]byte, error)) Session {
	return &httpSession{url: url, contentType: contentType, encode: encode,
		client: &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}}
}

type httpSession struct {
	url, contentType string
	encode           func([]string) ([]byte, error)
	client           *http.Client
}

func (s *httpSession) Send(ctx context.Context, bodies []string) error {
	body, err := s.encode(bodies)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", s.contentType)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body) // the status is the answer; the text only explains it
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %d: %q", resp.StatusCode, msg)
	}
	return nil
}

func (s *httpSession) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// DatagramSession is a sender that sends each body, as format makes it, in
// a datagram of its own to a UDP source at addr.
func DatagramSession(ctx context.Context, addr string, format func(body string) string) (Session, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return nil, err
	}
	return datagramSession{c: c, format: format}, nil
}

type datagramSession struct {
	c      net.Conn
	format func(string) string
}

func (s datagramSession) Send(_ context.Context, bodies []string) error {
	for _, b := range bodies {
		if _, err := s.c.Write([]byte(s.format(b))); err != nil {
			return err
		}
	}
	return nil
}

func (s datagramSession) Close() error { return s.c.Close() }

// RPCClient is a client of Flume's RPC (avrorpc, thriftrpc): AppendBatch
// returns the source's reply, of type S.
type RPCClient[S any] interface {
	AppendBatch(ctx context.Context, events []event.Event) (S, error)
	Close() error
}

// RPCSession is a sender over c that takes the reply ok for an
// acknowledgement; another reply is an error that names it.
func RPCSession[S comparable, C RPCClient[S]](c C, ok S) Session {
	return rpcSession[S, C]{c: c, ok: ok}
}

type rpcSession[S comparable, C RPCClient[S]] struct {
	c  C
	ok S
}

func (s rpcSession[S, C]) Send(ctx context.Context, bodies []string) error {
	reply, err := s.c.AppendBatch(ctx, Events(bodies))
	if err != nil {
		return err
	}
	if reply != s.ok {
		return fmt.Errorf("replied %v", reply)
	}
	return nil
}

func (s rpcSession[S, C]) Close() error { return s.c.Close() }
