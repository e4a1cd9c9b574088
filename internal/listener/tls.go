package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// Reasons for connections closed at the TLS handshake. Both count in
// TLSHandshakeFailCount; a connection closed before it sent a byte (a TCP
// health check, a port scan) is told at DEBUG only.
var (
	ReasonTLSHandshake = Reason{Counter: "TLSHandshakeFailCount", Level: slog.LevelWarn,
		Msg: "closed a connection whose TLS handshake failed (not TLS, or no protocol, cipher or certificate both ends accept)"}
	ReasonTLSNoHello = Reason{Counter: "TLSHandshakeFailCount", Level: slog.LevelDebug,
		Msg: "closed a connection that ended before its TLS handshake began"}
)

// TLSReasons are the reasons HandshakeTLS and HTTP count, for a TLS
// source to register with its other reasons.
var TLSReasons = []Reason{ReasonTLSHandshake}

// HandshakeTLS runs the server side of a TLS handshake over c, which the
// caller closes on error. c's group rules bound the handshake (it is a
// message in progress: a client that sends its hello at a trickle is
// closed by the progress rule, one that sends nothing by the idle timeout);
// ctx ends it at a stop. A failure is counted and told (throttled) in
// rejects. After a handshake c is idle: no message has begun.
func HandshakeTLS(ctx context.Context, c net.Conn, cfg *tls.Config, rejects *Rejects) (*tls.Conn, error) {
	return handshake(ctx, ctx, c, cfg, rejects)
}

// handshake runs the handshake within hctx; stop is the source's stop.
func handshake(stop, hctx context.Context, c net.Conn, cfg *tls.Config, rejects *Rejects) (*tls.Conn, error) {
	tc := tls.Server(c, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		lc := Of(c)
		if stop.Err() == nil && (lc == nil || lc.ClosedBy() == "") { // not a stop, nor the group's own close (told already)
			rejects.Add(tlsReason(err), c.RemoteAddr().String(), "err", err)
		}
		return nil, err
	}
	if lc := Of(c); lc != nil {
		lc.Idle()
	}
	return tc, nil
}

func tlsReason(err error) Reason {
	if errors.Is(err, io.EOF) {
		return ReasonTLSNoHello
	}
	return ReasonTLSHandshake
}

// connKey finds a request's *Conn in its context.
type connKey struct{}

// ConnOf returns the *Conn a request arrived on, from its context, for a
// server prepared by HTTP; nil for others.
func ConnOf(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// HTTP prepares srv, a server that serves on a Group's listener (plain,
// or TLS over it), to keep the group's rules and tell what they cut:
//
//   - ReadHeaderTimeout and ReadTimeout are turned off: a request's headers
//     (and body) arriving are a message in progress, bounded by the
//     group's progress rule, and an idle connection by its idle timeout,
//     each counted and logged, where net/http's timeouts cut in silence;
//   - a connection goes Idle between requests (ConnState);
//   - net/http's connection errors (ErrorLog) are rejects: failed TLS
//     handshakes as ReasonTLSHandshake, the rest as other.
//
// The handler marks a connection Busy (ConnOf(r.Context()).Busy()) once
// the request has arrived, so the wait for the answer is not measured; a
// request whose body is still to be read stays Receiving until it is read.
func HTTP(srv *http.Server, rejects *Rejects, other Reason) {
	srv.ReadHeaderTimeout, srv.ReadTimeout = 0, 0
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if lc := Of(c); lc != nil && st == http.StateIdle {
			lc.Idle()
		}
	}
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, Of(c))
	}
	srv.ErrorLog = log.New(errorLog{rejects, other}, "", 0)
}

// errorLog turns net/http's connection error lines into rejects.
type errorLog struct {
	rejects *Rejects
	other   Reason
}

// net/http's line for a failed handshake: "http: TLS handshake error from
// ADDR: ERR".
const tlsErrorPrefix = "http: TLS handshake error from "

func (e errorLog) Write(b []byte) (int, error) {
	line := strings.TrimSpace(string(b))
	rest, ok := strings.CutPrefix(line, tlsErrorPrefix)
	if !ok {
		e.rejects.Add(e.other, "", "err", line)
		return len(b), nil
	}
	peer, msg, _ := strings.Cut(rest, ": ")
	switch {
	case strings.Contains(msg, net.ErrClosed.Error()):
		// The group closed it (a trickled hello, a stop), and said so.
	case msg == io.EOF.Error():
		e.rejects.Add(ReasonTLSNoHello, peer, "err", msg)
	default:
		e.rejects.Add(ReasonTLSHandshake, peer, "err", msg)
	}
	return len(b), nil
}

// tlsHandshakeTimeout bounds a handshake on a connection no Group watches.
const tlsHandshakeTimeout = 10 * time.Second

// HandshakeTLSTimeout is HandshakeTLS for a connection no Group watches
// (within timeout, 0 for 10 s).
func HandshakeTLSTimeout(ctx context.Context, c net.Conn, cfg *tls.Config, rejects *Rejects, timeout time.Duration) (*tls.Conn, error) {
	if timeout <= 0 {
		timeout = tlsHandshakeTimeout
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return handshake(ctx, hctx, c, cfg, rejects)
}
