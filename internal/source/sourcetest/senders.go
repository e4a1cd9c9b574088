package sourcetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
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
