package avrorpc

import "fmt"

// Avro IPC handshake records (org.apache.avro.ipc):
//
//	HandshakeRequest  {MD5 clientHash; union{null,string} clientProtocol;
//	                   MD5 serverHash; union{null,map<bytes>} meta}
//	HandshakeResponse {enum HandshakeMatch{BOTH,CLIENT,NONE} match;
//	                   union{null,string} serverProtocol;
//	                   union{null,MD5} serverHash; union{null,map<bytes>} meta}

// Match is the HandshakeMatch of a handshake response.
type Match int

const (
	MatchBoth Match = iota
	MatchClient
	MatchNone
)

func (m Match) String() string {
	switch m {
	case MatchBoth:
		return "BOTH"
	case MatchClient:
		return "CLIENT"
	case MatchNone:
		return "NONE"
	}
	return fmt.Sprintf("Match(%d)", int(m))
}

type handshakeRequest struct {
	clientHash     MD5
	clientProtocol *string
	serverHash     MD5
}

type handshakeResponse struct {
	match          Match
	serverProtocol *string
	serverHash     *MD5
}

// appendHandshakeRequest writes a request as Java's Requester does, with an
// empty meta map (02 00).
func appendHandshakeRequest(b []byte, r handshakeRequest) []byte {
	b = append(b, r.clientHash[:]...)
	if r.clientProtocol == nil {
		b = append(b, 0)
	} else {
		b = append(b, 2)
		b = appendString(b, *r.clientProtocol)
	}
	b = append(b, r.serverHash[:]...)
	return append(b, 2, 0)
}

func (d *decoder) handshakeRequest() (handshakeRequest, error) {
	var r handshakeRequest
	if err := d.fixed(r.clientHash[:]); err != nil {
		return r, fmt.Errorf("clientHash: %w", err)
	}
	p, err := d.optString("clientProtocol")
	if err != nil {
		return r, err
	}
	r.clientProtocol = p
	if err := d.fixed(r.serverHash[:]); err != nil {
		return r, fmt.Errorf("serverHash: %w", err)
	}
	return r, d.optMeta()
}

// appendHandshakeResponse writes a response as Java's Responder does: the
// server's protocol and hash unless the match is BOTH, meta null.
func appendHandshakeResponse(b []byte, r handshakeResponse) []byte {
	b = appendLong(b, int64(r.match))
	if r.serverProtocol == nil {
		b = append(b, 0)
	} else {
		b = append(b, 2)
		b = appendString(b, *r.serverProtocol)
	}
	if r.serverHash == nil {
		b = append(b, 0)
	} else {
		b = append(b, 2)
		b = append(b, r.serverHash[:]...)
	}
	return append(b, 0)
}

func (d *decoder) handshakeResponse() (handshakeResponse, error) {
	var r handshakeResponse
	m, err := d.long()
	if err != nil {
		return r, fmt.Errorf("match: %w", err)
	}
	if m < 0 || m > int64(MatchNone) {
		return r, malformed("handshake match %d", m)
	}
	r.match = Match(m)
	if r.serverProtocol, err = d.optString("serverProtocol"); err != nil {
		return r, err
	}
	idx, err := d.long()
	if err != nil {
		return r, fmt.Errorf("serverHash: %w", err)
	}
	switch idx {
	case 0:
	case 1:
		var h MD5
		if err := d.fixed(h[:]); err != nil {
			return r, fmt.Errorf("serverHash: %w", err)
		}
		r.serverHash = &h
	default:
		return r, malformed("serverHash union index %d", idx)
	}
	return r, d.optMeta()
}

func (d *decoder) optString(what string) (*string, error) {
	idx, err := d.long()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	switch idx {
	case 0:
		return nil, nil
	case 1:
		s, err := d.str()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		s = string([]byte(s)) // kept beyond the message (protocol cache)
		return &s, nil
	}
	return nil, malformed("%s union index %d", what, idx)
}

func (d *decoder) optMeta() error {
	idx, err := d.long()
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	switch idx {
	case 0:
		return nil
	case 1:
		if err := d.skipBytesMap(); err != nil {
			return fmt.Errorf("meta: %w", err)
		}
		return nil
	}
	return malformed("meta union index %d", idx)
}
