package avrorpc

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"crypto/md5"
	"encoding/hex"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Byte-level compatibility with Flume's Java client and server
// (flume-reference §1 worked example).

var (
	md5Flume = ProtocolHash[:]
	// Java client's first appendBatch of one event {k:v} "hello".
	javaFirstBatch = cat(md5Flume, []byte{0x00}, md5Flume, []byte{0x02, 0x00}, // handshake, meta {}
		[]byte{0x00}, []byte{0x16}, []byte("appendBatch"), // call meta, name
		[]byte{0x02, 0x02, 0x02, 'k', 0x02, 'v', 0x00, 0x0a}, []byte("hello"), []byte{0x00})
	// Its later calls carry no handshake.
	javaLaterBatch = cat([]byte{0x00, 0x16}, []byte("appendBatch"),
		[]byte{0x02, 0x02, 0x02, 'k', 0x02, 'v', 0x00, 0x0a}, []byte("hello"), []byte{0x00})
	// Flume's server replies: handshake BOTH, meta, no error, OK.
	javaFirstReply = []byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}
	javaLaterReply = []byte{0x00, 0x00, 0x00}
)

var helloEvent = event.Event{Headers: event.HeadersOf(map[string]string{"k": "v"}), Body: []byte("hello")}

func TestClientSendsJavaBytes(t *testing.T) {
	tests := []struct {
		name    string
		deflate bool
	}{{"plain", false}, {"deflate", true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			done := make(chan error, 1)
			go func() {
				done <- func() error {
					c, err := ln.Accept()
					if err != nil {
						return err
					}
					defer c.Close()
					var r io.Reader = c
					var w io.Writer = c
					var zw *zlib.Writer
					if tt.deflate {
						br := bufio.NewReader(c)
						hdr, _ := br.Peek(2)
						if hdr[0] != 0x78 {
							t.Errorf("deflate stream starts %x, want a zlib header 78..", hdr)
						}
						zr, err := zlib.NewReader(br)
						if err != nil {
							return err
						}
						r = zr
						zw = zlib.NewWriter(c)
						w = zw
					}
					send := func(serial int32, msg []byte) {
						_, _ = w.Write(framed(serial, msg, 8192))
						if zw != nil {
							_ = zw.Flush()
						}
					}
					br := bufio.NewReader(r)
					serial, msg := readRawPack(t, br)
					if serial != 1 || !bytes.Equal(msg, javaFirstBatch) {
						t.Errorf("first request serial %d\n got %x\nwant %x", serial, msg, javaFirstBatch)
					}
					send(serial, javaFirstReply)
					serial, msg = readRawPack(t, br)
					if serial != 2 || !bytes.Equal(msg, javaLaterBatch) {
						t.Errorf("second request serial %d\n got %x\nwant %x", serial, msg, javaLaterBatch)
					}
					send(serial, javaLaterReply)
					return nil
				}()
			}()
			cl, err := Dial(context.Background(), ln.Addr().String(), ClientConfig{Deflate: tt.deflate})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for i := range 2 {
				st, err := cl.AppendBatch(context.Background(), []event.Event{helloEvent})
				if err != nil || st != OK {
					t.Fatalf("call %d: %v %v", i, st, err)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestServerRepliesLikeFlume(t *testing.T) {
	for _, frameSize := range []int{8192, 5, 1} {
		rec := &recorder{}
		addr, results := serve(t, &Server{Handler: rec})
		c := dialRaw(t, addr)
		br := bufio.NewReader(c)
		if _, err := c.Write(framed(1, javaFirstBatch, frameSize)); err != nil {
			t.Fatal(err)
		}
		serial, msg := readRawPack(t, br)
		if serial != 1 || !bytes.Equal(msg, javaFirstReply) {
			t.Fatalf("frames of %d: first reply serial %d: %x, want %x", frameSize, serial, msg, javaFirstReply)
		}
		if _, err := c.Write(framed(2, javaLaterBatch, frameSize)); err != nil {
			t.Fatal(err)
		}
		serial, msg = readRawPack(t, br)
		if serial != 2 || !bytes.Equal(msg, javaLaterReply) {
			t.Fatalf("later reply serial %d: %x, want %x", serial, msg, javaLaterReply)
		}
		c.Close()
		if err := testutil.NextResult(t, results, 10*time.Second); err != nil {
			t.Fatalf("clean close gave %v", err)
		}
		got := rec.events()
		if len(got) != 2 || got[0].Header("k") != "v" || string(got[1].Body) != "hello" {
			t.Fatalf("events %+v", got)
		}
	}
}

func TestServerHandshakeVariants(t *testing.T) {
	var other MD5
	copy(other[:], bytes.Repeat([]byte{0xab}, 16))
	protoNoDoc := []byte(stringsReplace(ProtocolJSON, `"doc":"`+licenseDoc+`",`, ""))
	noDocHash := md5.Sum(protoNoDoc)
	var unknown MD5
	copy(unknown[:], bytes.Repeat([]byte{0x11}, 16))
	trunk, _ := hex.DecodeString("8076c53714e01f6e2c1deb9544e7b1fe")

	call := cat([]byte{0x00, 0x16}, []byte("appendBatch"), []byte{0x02, 0x00, 0x02, 'x', 0x00})
	serverInfo := cat([]byte{0x02}, str(ProtocolJSON), []byte{0x02}, md5Flume)
	ok := []byte{0x00, 0x00, 0x00}
	fail := []byte{0x00, 0x00, 0x02}

	tests := []struct {
		name  string
		steps [][2][]byte // request, reply
	}{
		{"BOTH", [][2][]byte{{cat(md5Flume, []byte{0}, md5Flume, []byte{2, 0}, call), cat([]byte{0, 0, 0, 0}, ok)}}},
		{"BOTH with null meta", [][2][]byte{{cat(md5Flume, []byte{0}, md5Flume, []byte{0}, call), cat([]byte{0, 0, 0, 0}, ok)}}},
		{"CLIENT: client guessed the server hash wrong", [][2][]byte{
			{cat(md5Flume, []byte{0}, other[:], []byte{2, 0}, call), cat([]byte{0x02}, serverInfo, []byte{0}, ok)},
			{call, ok},
		}},
		{"trunk Flume's hash is known", [][2][]byte{{cat(trunk, []byte{0}, md5Flume, []byte{2, 0}, call), cat([]byte{0, 0, 0, 0}, ok)}}},
		{"NONE, then resend with the protocol", [][2][]byte{
			{cat(unknown[:], []byte{0}, md5Flume, []byte{2, 0}, call), cat([]byte{0x04}, serverInfo, []byte{0})},
			{cat(unknown[:], []byte{2}, str(string(protoNoDoc)), md5Flume, []byte{2, 0}, call), cat([]byte{0, 0, 0, 0}, ok)},
			{call, ok},
		}},
		{"protocol without doc, sent at once", [][2][]byte{
			{cat(noDocHash[:], []byte{2}, str(string(protoNoDoc)), other[:], []byte{2, 0}, call), cat([]byte{0x02}, serverInfo, []byte{0}, ok)},
		}},
		{"handshake ping", [][2][]byte{
			{cat(md5Flume, []byte{0}, md5Flume, []byte{2, 0}, []byte{0, 0}), []byte{0, 0, 0, 0}},
			{[]byte{0, 0}, nil},
			{call, ok},
		}},
		{"append", [][2][]byte{{cat(md5Flume, []byte{0}, md5Flume, []byte{2, 0}, []byte{0, 0x0c}, []byte("append"), []byte{0x00, 0x02, 'y'}), cat([]byte{0, 0, 0, 0}, fail)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{status: OK}
			if tt.name == "append" {
				rec.status = Failed
			}
			addr, results := serve(t, &Server{Handler: rec})
			c := dialRaw(t, addr)
			br := bufio.NewReader(c)
			for i, s := range tt.steps {
				if _, err := c.Write(framed(int32(i+7), s[0], 8192)); err != nil {
					t.Fatal(err)
				}
				serial, msg := readRawPack(t, br)
				if serial != int32(i+7) || !bytes.Equal(msg, s[1]) {
					t.Fatalf("step %d: serial %d\n got %x\nwant %x", i, serial, msg, s[1])
				}
			}
			c.Close()
			if err := testutil.NextResult(t, results, 10*time.Second); err != nil {
				t.Fatalf("ServeConn: %v", err)
			}
		})
	}
}

func stringsReplace(s, old, new string) string {
	return string(bytes.Replace([]byte(s), []byte(old), []byte(new), 1))
}

// TestClientAfterNone checks the client resends with its protocol text
// when a server does not know its hash, as Java's Requester does: whether
// the server's NONE reply holds only the handshake (Java's Responder) or is
// followed by an error response (avsc's server), the client ignores what
// follows the handshake and resends.
func TestClientAfterNone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after []byte // what the NONE reply holds after the handshake response
	}{
		{"only the handshake", nil},
		// Response metadata {}, error flag true, union{string} index 0, the message.
		{"handshake then an error response", cat([]byte{0x00, 0x01, 0x00}, str("unknown protocol"))},
	} {
		t.Run(tc.name, func(t *testing.T) { clientAfterNone(t, tc.after) })
	}
}

func clientAfterNone(t *testing.T, after []byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var otherHash MD5
	copy(otherHash[:], bytes.Repeat([]byte{0x42}, 16))
	otherInfo := cat([]byte{0x02}, str(ProtocolJSON), []byte{0x02}, otherHash[:])
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		serial, msg := readRawPack(t, br)
		if !bytes.Equal(msg, javaFirstBatch) {
			t.Errorf("first request %x", msg)
		}
		_, _ = c.Write(framed(serial, cat([]byte{0x04}, otherInfo, []byte{0}, after), 8192))
		serial, msg = readRawPack(t, br)
		want := cat(md5Flume, []byte{2}, str(ProtocolJSON), otherHash[:], []byte{2, 0}, javaLaterBatch)
		if !bytes.Equal(msg, want) {
			t.Errorf("resent request\n got %x\nwant %x", msg, want)
		}
		_, _ = c.Write(framed(serial, cat([]byte{0x00, 0x00, 0x00, 0x00}, []byte{0, 0, 2}), 8192))
		serial, msg = readRawPack(t, br)
		if !bytes.Equal(msg, javaLaterBatch) {
			t.Errorf("third request %x", msg)
		}
		_, _ = c.Write(framed(serial, javaLaterReply, 8192))
	}()
	defer func() { <-served }()
	cl, err := Dial(context.Background(), ln.Addr().String(), ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if st, err := cl.AppendBatch(context.Background(), []event.Event{helloEvent}); err != nil || st != Failed {
		t.Fatalf("first call: %v %v, want FAILED", st, err)
	}
	if st, err := cl.AppendBatch(context.Background(), []event.Event{helloEvent}); err != nil || st != OK {
		t.Fatalf("second call: %v %v", st, err)
	}
}
