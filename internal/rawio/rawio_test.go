package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// raw makes this test use the raw calls, also in a -race build.
func raw(t *testing.T) {
	if !Supported {
		t.Skip("no raw socket calls on this system")
	}
	old := useRaw
	useRaw = true
	t.Cleanup(func() { useRaw = old })
}

// The raw Reader reads as net.Conn does: what arrives, waiting for it,
// io.EOF at the end, the deadline's error when it passes.
func TestReader(t *testing.T) {
	raw(t)
	a, b := tcpPair(t)
	r := NewReader(b)
	if r == nil {
		t.Fatal("no raw reader for a TCP connection")
	}
	buf := make([]byte, 64)
	go func() {
		time.Sleep(20 * time.Millisecond) // the read waits for it
		a.Write([]byte("hello\n"))
	}()
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "hello\n" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	b.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v, want os.ErrDeadlineExceeded", err)
	}
	b.SetReadDeadline(time.Time{})
	a.Write([]byte("last"))
	a.CloseWrite()
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "last" {
		t.Fatalf("ReadAll = %q, %v; want the last bytes then io.EOF", got, err)
	}
}

// The raw Writer writes everything, waiting while the socket is full, and
// fails with the deadline's error when the peer stops reading.
func TestWriter(t *testing.T) {
	raw(t)
	a, b := tcpPair(t)
	// Small socket buffers, so 4 MiB cannot fit in them whatever the
	// kernel's autotuning would allow (loopback buffers can grow past 4 MiB).
	if err := a.SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if err := b.SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	w := NewWriter(a)
	if w == nil {
		t.Fatal("no raw writer for a TCP connection")
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: more than the socket buffers
	got := make(chan []byte, 1)
	go func() {
		var out bytes.Buffer
		buf := make([]byte, 4096)
		for out.Len() < len(big) {
			n, err := b.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				break
			}
			if out.Len() < 1<<20 {
				time.Sleep(time.Millisecond) // slow at first: the writer must wait
			}
		}
		got <- out.Bytes()
	}()
	n, err := w.Write(big)
	if err != nil || n != len(big) {
		t.Fatalf("Write = %d, %v; want %d", n, err, len(big))
	}
	if !bytes.Equal(<-got, big) {
		t.Fatal("the peer read other bytes than were written")
	}
	// Nobody reads now: the write fills the buffers and hits its deadline.
	a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := w.Write(big); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write to a peer that does not read = %v, want os.ErrDeadlineExceeded", err)
	}
}

// Recv sees data, nothing (EAGAIN) and the peer's close.
func TestRecv(t *testing.T) {
	raw(t)
	a, b := tcpPair(t)
	rc, err := b.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	recv := func() (int, error) {
		var n int
		var rerr error
		if err := rc.Control(func(fd uintptr) { n, rerr = Recv(fd, make([]byte, 16)) }); err != nil {
			return 0, err
		}
		return n, rerr
	}
	if _, err := recv(); err == nil {
		t.Fatal("Recv on an empty socket did not report EAGAIN")
	}
	a.Write([]byte("x"))
	time.Sleep(20 * time.Millisecond)
	if n, err := recv(); n != 1 || err != nil {
		t.Fatalf("Recv = %d, %v; want the 1 byte sent", n, err)
	}
	a.Close()
	time.Sleep(20 * time.Millisecond)
	if n, err := recv(); n != 0 || err != nil {
		t.Fatalf("Recv after the peer closed = %d, %v; want 0, nil (end of stream)", n, err)
	}
}

// ReadNow never waits: what has arrived, 0 and no error when nothing has,
// io.EOF after the peer closed; with the raw calls and without them.
func TestReadNow(t *testing.T) {
	for _, useRawCalls := range []bool{true, false} {
		t.Run(map[bool]string{true: "raw", false: "scheduler"}[useRawCalls], func(t *testing.T) {
			if useRawCalls {
				raw(t)
			} else {
				old := useRaw
				useRaw = false
				t.Cleanup(func() { useRaw = old })
			}
			a, b := tcpPair(t)
			rc, err := b.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 16)
			start := time.Now()
			if n, err := ReadNow(rc, buf); n != 0 || err != nil {
				t.Fatalf("ReadNow on an empty socket = %d, %v; want 0, nil", n, err)
			}
			if el := time.Since(start); el > 500*time.Millisecond {
				t.Fatalf("ReadNow waited %v", el)
			}
			a.Write([]byte("abc"))
			var got []byte
			deadline := time.Now().Add(5 * time.Second)
			for len(got) < 3 && time.Now().Before(deadline) {
				n, err := ReadNow(rc, buf)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, buf[:n]...)
			}
			if string(got) != "abc" {
				t.Fatalf("ReadNow got %q, want abc", got)
			}
			a.Close()
			for time.Now().Before(deadline) {
				if _, err := ReadNow(rc, buf); err != nil {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("ReadNow after the peer closed = %v, want io.EOF", err)
					}
					return
				}
			}
			t.Fatal("ReadNow never saw the end of the stream")
		})
	}
}
