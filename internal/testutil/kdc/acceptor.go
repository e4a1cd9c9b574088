package kdc

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jcmturner/gokrb5/v8/crypto"
	"github.com/jcmturner/gokrb5/v8/gssapi"
	"github.com/jcmturner/gokrb5/v8/iana/keyusage"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/service"
	"github.com/jcmturner/gokrb5/v8/spnego"
	"github.com/jcmturner/gokrb5/v8/types"
)

// Acceptor is a Kerberos service's side of SASL GSSAPI (RFC 4752), as a
// Kafka broker or an HDFS namenode runs it, for stand-ins of those
// servers: it verifies a client's AP-REQ with the service's keytab
// (gokrb5's service side: the ticket must decrypt with the keytab's key,
// be current within a second and not be replayed), offers no security
// layer in a wrap token sealed with the ticket's session key, and checks
// the client's sealed answer.
type Acceptor struct{ kt *keytab.Keytab }

// NewAcceptor reads the service's keytab.
func NewAcceptor(keytabPath string) (*Acceptor, error) {
	kt, err := keytab.Load(keytabPath)
	if err != nil {
		return nil, err
	}
	return &Acceptor{kt: kt}, nil
}

// Exchange is one client's authentication.
type Exchange struct {
	a    *Acceptor
	step int
	key  types.EncryptionKey
	// Client is the authenticated principal (name@REALM), once the AP-REQ
	// verified; Service the principal its ticket is for; EndTime when the
	// ticket ends.
	Client, Service string
	EndTime         time.Time
}

// Begin starts an exchange.
func (a *Acceptor) Begin() *Exchange { return &Exchange{a: a} }

// Step takes the client's next token and returns the answer, and whether
// the client is now authenticated. An error is the refusal, in one line.
func (x *Exchange) Step(token []byte) (out []byte, done bool, err error) {
	switch x.step {
	case 0:
		var t spnego.KRB5Token
		if err := t.Unmarshal(token); err != nil {
			return nil, false, fmt.Errorf("not a Kerberos token: %v", err)
		}
		if !t.IsAPReq() {
			return nil, false, errors.New("the first token is not an AP-REQ")
		}
		s := service.NewSettings(x.a.kt, service.MaxClockSkew(time.Second), service.DecodePAC(false))
		ok, creds, err := service.VerifyAPREQ(&t.APReq, s)
		if err != nil || !ok {
			return nil, false, fmt.Errorf("ticket refused: %v", oneLine(err))
		}
		x.Client = creds.CName().PrincipalNameString() + "@" + creds.Realm()
		x.Service = t.APReq.Ticket.SName.PrincipalNameString()
		x.key = t.APReq.Ticket.DecryptedEncPart.Key
		x.EndTime = t.APReq.Ticket.DecryptedEncPart.EndTime
		et, err := crypto.GetEtype(x.key.KeyType)
		if err != nil {
			return nil, false, err
		}
		// Security layers offered: none (bit 1); no maximum message size.
		wt := gssapi.WrapToken{Flags: 0x01, EC: uint16(et.GetHMACBitLength() / 8), Payload: []byte{1, 0, 0, 0}}
		if err := wt.SetCheckSum(x.key, keyusage.GSSAPI_ACCEPTOR_SEAL); err != nil {
			return nil, false, err
		}
		b, err := wt.Marshal()
		if err != nil {
			return nil, false, err
		}
		x.step = 1
		return b, false, nil
	case 1:
		var wt gssapi.WrapToken
		if err := wt.Unmarshal(token, false); err != nil {
			return nil, false, fmt.Errorf("security layer answer: %v", err)
		}
		if ok, err := wt.Verify(x.key, keyusage.GSSAPI_INITIATOR_SEAL); !ok {
			return nil, false, fmt.Errorf("security layer answer: %v", oneLine(err))
		}
		x.step = 2
		return []byte{}, true, nil
	}
	return nil, false, errors.New("authentication already complete")
}

func oneLine(err error) string {
	if err == nil {
		return "not valid"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
