package kafkatest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GSSAPI is a broker's Kerberos side, for kfake, which speaks SASL PLAIN
// and SCRAM only: it sits on every connection the cluster accepts and does
// what a Kafka broker with sasl.enabled.mechanisms=GSSAPI does before
// passing requests on. It answers SaslHandshake and SaslAuthenticate
// itself, verifies the client's AP-REQ with the service's keytab (gokrb5's
// service side: the ticket must decrypt with the keytab's key, be current
// and not replayed), runs RFC 4752's security layer exchange (wrap tokens
// sealed with the ticket's session key), and closes a connection that
// sends anything but ApiVersions before it authenticated. With
// SessionLifetime (KIP-368, connections.max.reauth.ms), each session lasts
// until its ticket ends at most, the lifetime is told to the client, and a
// connection that did not re-authenticate in time is closed.
type GSSAPI struct {
	// SessionLifetime caps a session (0: sessions last as long as the
	// connection, Kafka's default).
	SessionLifetime time.Duration

	keytab *keytab.Keytab

	mu       sync.Mutex
	accepted map[string]int // client principal: sessions accepted
	refused  []string
}

// NewGSSAPI starts a one-broker cluster whose clients must authenticate
// with Kerberos (SASL GSSAPI) for a service whose keys keytab holds (such
// as kafka/127.0.0.1@REALM: franz-go asks for <service>/<broker host>).
func NewGSSAPI(tb testing.TB, keytabPath string, sessionLifetime time.Duration, topics ...string) (*Cluster, *GSSAPI) {
	tb.Helper()
	kt, err := keytab.Load(keytabPath)
	if err != nil {
		tb.Fatal(err)
	}
	g := &GSSAPI{SessionLifetime: sessionLifetime, keytab: kt, accepted: map[string]int{}}
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

	pending []byte // a frame for kfake, partly read
	step    int
	key     types.EncryptionKey // the ticket's session key
	authed  bool
	expiry  time.Time
	client  string
	endTime time.Time
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
				c.Conn.Close()
				return 0, err
			}
			continue
		case 18: // ApiVersions
		default:
			if !c.authed {
				c.Conn.Close()
				return 0, fmt.Errorf("request %d before SASL authentication", key)
			}
			if !c.expiry.IsZero() && time.Now().After(c.expiry) {
				// KIP-368: the session ended and the client did not
				// re-authenticate; the broker closes the connection.
				c.Conn.Close()
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
		c.step, c.authed = 0, false
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

// authenticate runs one step of RFC 4752: the AP-REQ, then the client's
// answer to the security layer offer.
func (c *gssConn) authenticate(token []byte) (out []byte, lifetimeMillis int64, err error) {
	switch c.step {
	case 0:
		var t spnego.KRB5Token
		if err := t.Unmarshal(token); err != nil {
			return nil, 0, fmt.Errorf("not a Kerberos token: %v", err)
		}
		if !t.IsAPReq() {
			return nil, 0, errors.New("the first token is not an AP-REQ")
		}
		s := service.NewSettings(c.g.keytab, service.MaxClockSkew(time.Second), service.DecodePAC(false))
		ok, creds, err := service.VerifyAPREQ(&t.APReq, s)
		if err != nil || !ok {
			return nil, 0, fmt.Errorf("ticket refused: %v", oneLine(err))
		}
		c.client = creds.CName().PrincipalNameString() + "@" + creds.Realm()
		c.key = t.APReq.Ticket.DecryptedEncPart.Key
		c.endTime = t.APReq.Ticket.DecryptedEncPart.EndTime
		// Offer no security layer (bit 1), as a broker does.
		wt := gssapi.WrapToken{Flags: 0x01, RRC: 0, SndSeqNum: 0, Payload: []byte{1, 0, 0, 0}}
		et, err := crypto.GetEtype(c.key.KeyType)
		if err != nil {
			return nil, 0, err
		}
		wt.EC = uint16(et.GetHMACBitLength() / 8)
		if err := wt.SetCheckSum(c.key, keyusage.GSSAPI_ACCEPTOR_SEAL); err != nil {
			return nil, 0, err
		}
		b, err := wt.Marshal()
		if err != nil {
			return nil, 0, err
		}
		c.step = 1
		return b, 0, nil
	case 1:
		var wt gssapi.WrapToken
		if err := wt.Unmarshal(token, false); err != nil {
			return nil, 0, fmt.Errorf("security layer answer: %v", err)
		}
		if ok, err := wt.Verify(c.key, keyusage.GSSAPI_INITIATOR_SEAL); !ok {
			return nil, 0, fmt.Errorf("security layer answer: %v", err)
		}
		c.step, c.authed = 2, true
		c.expiry = time.Time{}
		if c.g.SessionLifetime > 0 {
			c.expiry = time.Now().Add(c.g.SessionLifetime)
			if c.endTime.Before(c.expiry) {
				c.expiry = c.endTime
			}
			lifetimeMillis = max(time.Until(c.expiry).Milliseconds(), 1)
		}
		c.g.mu.Lock()
		c.g.accepted[c.client]++
		c.g.mu.Unlock()
		return []byte{}, lifetimeMillis, nil
	}
	return nil, 0, errors.New("authentication already complete")
}

func oneLine(err error) string {
	if err == nil {
		return "not valid"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
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
