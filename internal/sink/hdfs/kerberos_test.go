package hdfssink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/kerberos"
	"github.com/sluicehq/sluice/internal/testutil/kdc"
)

// kerberizedNamenode stands in for the connection setup of a namenode with
// hadoop.security.authentication = kerberos: it reads Hadoop's RPC
// connection header and runs the SASL exchange of Hadoop's RPC (NEGOTIATE
// offering KERBEROS/GSSAPI for protocol nn, INITIATE, CHALLENGE, RESPONSE,
// SUCCESS), verifying the client's ticket with the namenode's keytab
// (kdc.Acceptor). It serves no filesystem calls: after the exchange it
// closes the connection.
type kerberizedNamenode struct {
	ln net.Listener
	a  *kdc.Acceptor

	mu       sync.Mutex
	protocol []byte   // the auth protocol byte of each connection header
	clients  []string // principal -> service, per authenticated connection
	refused  []string
}

func startNamenode(t *testing.T, keytab string) *kerberizedNamenode {
	t.Helper()
	a, err := kdc.NewAcceptor(keytab)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nn := &kerberizedNamenode{ln: ln, a: a}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); nn.serve(c) }()
		}
	}()
	return nn
}

func (nn *kerberizedNamenode) serve(c net.Conn) {
	var hdr [7]byte // "hrpc", version, service class, auth protocol
	if _, err := io.ReadFull(c, hdr[:]); err != nil || string(hdr[:4]) != "hrpc" {
		return
	}
	nn.mu.Lock()
	nn.protocol = append(nn.protocol, hdr[6])
	nn.mu.Unlock()
	if hdr[6] != 0xdf { // not SASL: a kerberized namenode refuses
		return
	}
	x := nn.a.Begin()
	for {
		state, token, err := readSasl(c)
		if err != nil {
			return
		}
		var out []byte
		var next uint64
		switch state {
		case 1: // NEGOTIATE
			auth := protowire.AppendTag(nil, 1, protowire.BytesType)
			auth = protowire.AppendString(auth, "KERBEROS")
			auth = protowire.AppendTag(auth, 2, protowire.BytesType)
			auth = protowire.AppendString(auth, "GSSAPI")
			auth = protowire.AppendTag(auth, 3, protowire.BytesType)
			auth = protowire.AppendString(auth, "nn")
			auth = protowire.AppendTag(auth, 4, protowire.BytesType)
			auth = protowire.AppendString(auth, "127.0.0.1")
			writeSasl(c, 1, nil, auth)
			continue
		case 2, 4: // INITIATE, RESPONSE
			var done bool
			out, done, err = x.Step(token)
			if err != nil {
				nn.mu.Lock()
				nn.refused = append(nn.refused, err.Error())
				nn.mu.Unlock()
				return
			}
			next = 3 // CHALLENGE
			if done {
				next = 0 // SUCCESS
				nn.mu.Lock()
				nn.clients = append(nn.clients, x.Client+" -> "+x.Service)
				nn.mu.Unlock()
			}
		default:
			return
		}
		writeSasl(c, next, out, nil)
		if next == 0 {
			return
		}
	}
}

// readSasl reads one RPC packet of the SASL exchange: a request header and
// an RpcSaslProto, of which it returns the state and the token.
func readSasl(r io.Reader) (state uint64, token []byte, err error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return 0, nil, err
	}
	p := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	var msgs [][]byte
	for len(p) > 0 {
		m, n := protowire.ConsumeBytes(p)
		if n < 0 {
			return 0, nil, errors.New("bad packet")
		}
		msgs, p = append(msgs, m), p[n:]
	}
	if len(msgs) != 2 {
		return 0, nil, fmt.Errorf("%d messages in a SASL packet", len(msgs))
	}
	for b := msgs[1]; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, nil, errors.New("bad field")
		}
		b = b[n:]
		switch {
		case num == 2 && typ == protowire.VarintType:
			state, n = protowire.ConsumeVarint(b)
		case num == 3 && typ == protowire.BytesType:
			token, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return 0, nil, errors.New("bad field")
		}
		b = b[n:]
	}
	return state, token, nil
}

// writeSasl answers with a response header (the SASL call id, SUCCESS) and
// an RpcSaslProto of state, token and one auth.
func writeSasl(w io.Writer, state uint64, token, auth []byte) {
	h := protowire.AppendTag(nil, 1, protowire.VarintType)
	h = protowire.AppendVarint(h, uint64(uint32(0xFFFFFFDF))) // call id -33
	h = protowire.AppendTag(h, 2, protowire.VarintType)
	h = protowire.AppendVarint(h, 0)
	s := protowire.AppendTag(nil, 2, protowire.VarintType)
	s = protowire.AppendVarint(s, state)
	if token != nil {
		s = protowire.AppendTag(s, 3, protowire.BytesType)
		s = protowire.AppendBytes(s, token)
	}
	if auth != nil {
		s = protowire.AppendTag(s, 4, protowire.BytesType)
		s = protowire.AppendBytes(s, auth)
	}
	body := protowire.AppendBytes(nil, h)
	body = protowire.AppendBytes(body, s)
	pkt := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	_, _ = w.Write(append(pkt, body...))
}

func hadoopConf(t *testing.T, nnAddr string) {
	t.Helper()
	dir := t.TempDir()
	prop := func(k, v string) string {
		return "<property><name>" + k + "</name><value>" + v + "</value></property>\n"
	}
	core := "<configuration>\n" + prop("fs.defaultFS", "hdfs://"+nnAddr) + prop("hadoop.security.authentication", "kerberos") + "</configuration>\n"
	site := "<configuration>\n" + prop("dfs.namenode.kerberos.principal", "nn/_HOST@"+kdc.Realm) + "</configuration>\n"
	for name, text := range map[string]string{"core-site.xml": core, "hdfs-site.xml": site} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HADOOP_CONF_DIR", dir)
}

// TestKerberizedHDFS follows a Flume hdfs sink config on a kerberized
// cluster as far as there is a cluster here: core-site.xml asks for
// Kerberos, hdfs-site.xml names the namenode's principal nn/_HOST@REALM,
// the sink's principal is flume/_HOST@REALM with a keytab. The sink logs
// in to a real KDC at start (_HOST being this host's name), and its HDFS
// client authenticates to a namenode stand-in with a ticket for
// nn/<namenode host>, which the stand-in verifies with the namenode's
// keytab. A stale keytab fails the start with the KDC's reason. (Not
// exercised: filesystem calls after authentication, datanode transfers
// with dfs.data.transfer.protection, a real namenode's authorization.)
func TestKerberizedHDFS(t *testing.T) {
	k := kdc.Start(t, kdc.Options{})
	host, err := kerberos.LocalHost()
	if err != nil {
		t.Fatal(err)
	}
	agentKT := k.AddPrincipal(t, "flume/"+host)
	nn := startNamenode(t, k.AddPrincipal(t, "nn/127.0.0.1"))
	hadoopConf(t, nn.ln.Addr().String())

	newSink := func(keytab string) *Sink {
		p := config.FromMap("a1.sinks.k1.", map[string]string{
			"hdfs.path":              "hdfs:///flume/events/%Y-%m-%d",
			"hdfs.useLocalTimeStamp": "true",
			"hdfs.kerberosPrincipal": "flume/_HOST@" + kdc.Realm,
			"hdfs.kerberosKeytab":    keytab,
			"hdfs.stagingDir":        t.TempDir(),
		})
		s, err := New(flow.Env{Agent: "a1", Name: "k1", Type: "hdfs", Sys: map[string]string{kerberos.SysKrb5Conf: k.Krb5Conf}}, p)
		if err != nil || p.Err() != nil {
			t.Fatalf("config: %v %v", err, p.Err())
		}
		return s.(*Sink)
	}
	s := newSink(agentKT)
	hs := s.w.store.(*hdfsStore)
	t.Cleanup(func() { _ = hs.close() })
	if want := "flume/" + host + "@" + kdc.Realm; hs.auth.login.Principal != want {
		t.Fatalf("principal %q, want _HOST expanded: %q", hs.auth.login.Principal, want)
	}
	if hs.opts.KerberosServicePrincipleName != "nn/_HOST" {
		t.Fatalf("namenode principal %q", hs.opts.KerberosServicePrincipleName)
	}
	if err := hs.login(); err != nil {
		t.Fatal(err)
	}
	c, err := hs.get()
	if err == nil {
		// The stand-in serves no calls: the first one fails, after the
		// authentication that matters here.
		_, _ = c.Stat("/flume")
	}
	nn.mu.Lock()
	protocol, clients, refused := append([]byte(nil), nn.protocol...), append([]string(nil), nn.clients...), nn.refused
	nn.mu.Unlock()
	if len(protocol) == 0 || protocol[0] != 0xdf {
		t.Fatalf("connection header auth protocols %x, want SASL (df)", protocol)
	}
	want := "flume/" + host + "@" + kdc.Realm + " -> nn/127.0.0.1"
	if len(clients) == 0 || clients[0] != want {
		t.Fatalf("namenode authenticated %q (refused %q), want %q", clients, refused, want)
	}

	// A keytab whose keys the KDC has changed since: the start fails.
	k.Keytab(t, "flume/"+host)
	err = newSink(agentKT).Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "hdfs sink: kerberos login as flume/"+host+"@"+kdc.Realm) || !strings.Contains(err.Error(), "KDC_ERR_PREAUTH_FAILED") {
		t.Fatalf("start with a stale keytab: %v", err)
	}
}
