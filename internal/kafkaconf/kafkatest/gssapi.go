package kafkatest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testutil/kdc"
)

// GSSAPI is a broker's Kerberos side, for kfake, which speaks SASL PLAIN
// and SCRAM only: it sits on every connection the cluster accepts and does
// what a Kafka broker with sasl.enabled.mechanisms=GSSAPI does before
// passing requests on. It answers SaslHandshake and SaslAuthenticate
// itself, runs RFC 4752 with the service's keytab (kdc.Acceptor: the
// client's ticket is verified, not trusted), and closes a connection that
// sends anything but ApiVersions before it authenticated. With
// SessionLifetime (KIP-368, connections.max.reauth.ms), each session lasts
// until its ticket ends at most, the lifetime is told to the client, and a
// connection that did not re-authenticate in time is closed.
type GSSAPI struct {
	// SessionLifetime caps a session (0: sessions last as long as the
	// connection, Kafka's default).
	SessionLifetime time.Duration

	acceptor *kdc.Acceptor

	mu       sync.Mutex
	accepted map[string]int // client principal: sessions accepted
	refused  []string
}

// NewGSSAPI starts a one-broker cluster whose clients must authenticate
// with Kerberos (SASL GSSAPI) for a service whose keys keytab holds (such
// as kafka/127.0.0.1@REALM: franz-go asks for <service>/<broker host>).
func NewGSSAPI(tb testing.TB, keytabPath string, sessionLifetime time.Duration, topics ...string) (*Cluster, *GSSAPI) {
	tb.Helper()
	a, err := kdc.NewAcceptor(keytabPath)
	if err != nil {
		tb.Fatal(err)
	}
	g := &GSSAPI{SessionLifetime: sessionLifetime, acceptor: a, accepted: map[string]int{}}
	c := &Cluster{wrap: g.wrap}
	return newClusterInto(tb, c, 1, 1, topics, true, nil), g
}

// Accepted is how many sessions each client principal opened.
func (g *GSSAPI) Accepted() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.accepted {
		out[k] = v
	}
	return out
}

// Refused lists why authentications were refused, one line each.
func (g *GSSAPI) Refused() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.refused...)
}

func (g *GSSAPI) wrap(c net.Conn) net.Conn { return &gssConn{Conn: c, g: g} }

// gssConn is one client connection: kfake reads from it the requests that
// got past authentication; the SASL ones are answered here.
type gssConn struct {
	net.Conn
	g *GSSAPI

	wmu sync.Mutex // kfake's responses and ours go out whole

	pending []byte        // a frame for kfake, partly read
	x       *kdc.Exchange // the authentication under way
	authed  bool
	expiry  time.Time
}

func (c *gssConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.Conn.Write(p)
}

func (c *gssConn) Read(p []byte) (int, error) {
	for len(c.pending) == 0 {
		frame, err := readFrame(c.Conn)
		if err != nil {
			return 0, err
		}
		if len(frame) < 12 {
			return 0, errors.New("short request")
		}
		key := int16(binary.BigEndian.Uint16(frame[4:]))
		switch key {
		case 17, 36: // SaslHandshake, SaslAuthenticate
			if err := c.sasl(frame); err != nil {
				_ = c.Close() // the error returned is what counts
				return 0, err
			}
			continue
		case 18: // ApiVersions
		default:
			if !c.authed {
				_ = c.Close() // the error returned is what counts
				return 0, fmt.Errorf("request %d before SASL authentication", key)
			}
			if !c.expiry.IsZero() && time.Now().After(c.expiry) {
				// KIP-368: the session ended and the client did not
				// re-authenticate; the broker closes the connection.
				_ = c.Close() // the error returned is what counts
				return 0, errors.New("session expired")
			}
		}
		c.pending = frame
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("request of %d bytes", n)
	}
	frame := make([]byte, 4+n)
	copy(frame, size[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

// sasl answers a SaslHandshake or SaslAuthenticate request; an error
// closes the connection after the answer.
func (c *gssConn) sasl(frame []byte) error {
	key := int16(binary.BigEndian.Uint16(frame[4:]))
	version := int16(binary.BigEndian.Uint16(frame[6:]))
	corr := binary.BigEndian.Uint32(frame[8:])
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	body := frame[12:]
	if len(body) < 2 {
		return errors.New("short request header")
	}
	if idLen := int16(binary.BigEndian.Uint16(body)); idLen > 0 {
		body = body[2+int(idLen):]
	} else {
		body = body[2:]
	}
	if req.IsFlexible() {
		var ok bool
		if body, ok = skipTags(body); !ok {
			return errors.New("bad request header tags")
		}
	}
	if err := req.ReadFrom(body); err != nil {
		return err
	}
	var resp kmsg.Response
	var fail error
	switch r := req.(type) {
	case *kmsg.SASLHandshakeRequest:
		hr := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hr.SupportedMechanisms = []string{"GSSAPI"}
		if r.Mechanism != "GSSAPI" {
			hr.ErrorCode = 33 // UNSUPPORTED_SASL_MECHANISM
		}
		c.x, c.authed = nil, false
		resp = hr
	case *kmsg.SASLAuthenticateRequest:
		ar := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		out, lifetime, err := c.authenticate(r.SASLAuthBytes)
		if err != nil {
			msg := "Authentication failed during authentication due to invalid credentials with SASL mechanism GSSAPI: " + err.Error()
			ar.ErrorCode, ar.ErrorMessage = 58, &msg // SASL_AUTHENTICATION_FAILED
			c.g.mu.Lock()
			c.g.refused = append(c.g.refused, err.Error())
			c.g.mu.Unlock()
			fail = err
		}
		ar.SASLAuthBytes, ar.SessionLifetimeMillis = out, lifetime
		resp = ar
	}
	buf := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(buf[4:], corr)
	if req.IsFlexible() {
		buf = append(buf, 0) // no response header tags
	}
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	if _, err := c.Write(buf); err != nil {
		return err
	}
	return fail
}

func skipTags(b []byte) ([]byte, bool) {
	n, used := binary.Uvarint(b)
	if used <= 0 {
		return nil, false
	}
	b = b[used:]
	for range n {
		if _, used = binary.Uvarint(b); used <= 0 {
			return nil, false
		}
		b = b[used:]
		size, used := binary.Uvarint(b)
		if used <= 0 || uint64(len(b)-used) < size {
			return nil, false
		}
		b = b[used+int(size):]
	}
	return b, true
}

// authenticate runs one step of RFC 4752 with the broker's keytab.
func (c *gssConn) authenticate(token []byte) (out []byte, lifetimeMillis int64, err error) {
	if c.x == nil {
		c.x = c.g.acceptor.Begin()
	}
	out, done, err := c.x.Step(token)
	if err != nil || !done {
		return out, 0, err
	}
	c.authed = true
	c.expiry = time.Time{}
	if c.g.SessionLifetime > 0 {
		c.expiry = time.Now().Add(c.g.SessionLifetime)
		if c.x.EndTime.Before(c.expiry) {
			c.expiry = c.x.EndTime
		}
		lifetimeMillis = max(time.Until(c.expiry).Milliseconds(), 1)
	}
	c.g.mu.Lock()
	c.g.accepted[c.x.Client]++
	c.g.mu.Unlock()
	return out, lifetimeMillis, nil
}

// wrapListener hands kfake the connections of ln through wrap.
type wrapListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}
