package otlpsink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/event"
)

// maxResponseBody is how much of an answer is read.
const maxResponseBody = 64 << 10

// httpExporter POSTs each request to the endpoint.
type httpExporter struct {
	opt  Options
	json bool
	hc   *http.Client
	buf  bytes.Buffer // the compressed body
	gz   *gzip.Writer
}

func (e *httpExporter) start() error {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: e.opt.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   e.opt.ConnectTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
		ExpectContinueTimeout: time.Second,
	}
	if e.opt.TLS.Enabled {
		host := e.opt.Endpoint
		if u, err := http.NewRequest(http.MethodPost, e.opt.Endpoint, nil); err == nil {
			host = u.URL.Hostname()
		}
		tc, err := e.opt.TLS.ClientConfig(host)
		if err != nil {
			return err
		}
		tr.TLSClientConfig = tc
	}
	e.hc = &http.Client{
		Transport: tr,
		// A redirect is an answer like any other; re-POSTing elsewhere is
		// not what the config says.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if e.opt.Gzip {
		e.gz = gzip.NewWriter(&e.buf)
	}
	return nil
}

func (e *httpExporter) stop() {
	if e.hc != nil {
		e.hc.CloseIdleConnections()
	}
}

func (e *httpExporter) contentType() string {
	if e.json {
		return "application/json"
	}
	return "application/x-protobuf"
}

func (e *httpExporter) export(ctx context.Context, events []event.Event) outcome {
	req := plogotlp.NewExportRequestFromLogs(e.opt.Mapping.Logs(events))
	var body []byte
	var err error
	if e.json {
		body, err = req.MarshalJSON()
	} else {
		body, err = req.MarshalProto()
	}
	if err != nil {
		return outcome{kind: kindKeepRetry, err: fmt.Errorf("otlp sink: encode: %w", err)}
	}
	if e.gz != nil {
		e.buf.Reset()
		e.gz.Reset(&e.buf)
		_, _ = e.gz.Write(body)
		if err := e.gz.Close(); err != nil {
			return outcome{kind: kindKeepRetry, err: fmt.Errorf("otlp sink: gzip: %w", err)}
		}
		body = e.buf.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.opt.RequestTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.opt.Endpoint, bytes.NewReader(body))
	if err != nil {
		return outcome{kind: kindKeepRetry, err: fmt.Errorf("otlp sink: %w", err)}
	}
	hr.Header.Set("Content-Type", e.contentType())
	hr.Header.Set("User-Agent", "sluice")
	if e.gz != nil {
		hr.Header.Set("Content-Encoding", "gzip")
	}
	for k, v := range e.opt.Headers {
		hr.Header.Set(k, v)
	}
	resp, err := e.hc.Do(hr)
	if err != nil {
		return outcome{kind: kindRetry, err: fmt.Errorf("otlp sink: POST to %s: %w", e.opt.Endpoint, err)}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody)) // let the connection serve again
	return httpOutcome(e.opt.Endpoint, resp, answer)
}

// httpOutcome classifies an answer.
func httpOutcome(endpoint string, resp *http.Response, answer []byte) outcome {
	isJSON := false
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && mt == "application/json" {
		isJSON = true
	}
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		if len(answer) == 0 {
			return outcome{kind: kindOK}
		}
		r := plogotlp.NewExportResponse()
		var err error
		if isJSON {
			err = r.UnmarshalJSON(answer)
		} else {
			err = r.UnmarshalProto(answer)
		}
		if err != nil {
			return outcome{kind: kindOK} // accepted; the details are unreadable
		}
		ps := r.PartialSuccess()
		return outcome{kind: kindOK, rejected: ps.RejectedLogRecords(), message: ps.ErrorMessage()}
	}
	msg := statusMessage(answer, isJSON)
	err := fmt.Errorf("otlp sink: %s answered %s: %s", endpoint, resp.Status, msg)
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return outcome{kind: kindRetry, delay: retryAfter(resp.Header.Get("Retry-After")), err: err}
	case http.StatusBadRequest:
		return outcome{kind: kindRejected, message: msg, err: err}
	case http.StatusRequestEntityTooLarge:
		return outcome{kind: kindTooLarge, message: msg, err: err}
	}
	return outcome{kind: kindKeepRetry, err: fmt.Errorf("%w (kept in the channel and retried: fix the downstream or this sink's config)", err)}
}

// statusMessage is the message of a google.rpc.Status answer, else the
// answer's start as text.
func statusMessage(answer []byte, isJSON bool) string {
	var st spb.Status
	var err error
	if isJSON {
		err = protojson.Unmarshal(answer, &st)
	} else {
		err = proto.Unmarshal(answer, &st)
	}
	if err == nil && st.GetMessage() != "" {
		return st.GetMessage()
	}
	s := strings.ToValidUTF8(strings.TrimSpace(string(answer)), "?")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}
