package testutil

import (
	"net"
	"sync"
	"testing"
	"time"
)

func TestLogBufferCounts(t *testing.T) {
	var l LogBuffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				l.Write([]byte("level=WARN msg=\"refused x; refused y\"\n"))
			}
		}()
	}
	wg.Wait()
	if n := l.Count("refused"); n != 200 {
		t.Errorf("Count = %d, want 200", n)
	}
	if n := l.Lines("refused"); n != 100 {
		t.Errorf("Lines = %d, want 100", n)
	}
}

func TestClosedByServer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(net.Conn)
		want  bool
	}{
		{"closed", func(c net.Conn) { c.Close() }, true},
		{"kept open", func(c net.Conn) { time.Sleep(500 * time.Millisecond); c.Close() }, false},
		{"answered, then closed", func(c net.Conn) { c.Write([]byte("FAILED\n")); c.Close() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				if c, err := ln.Accept(); err == nil {
					tc.serve(c)
				}
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := ClosedByServer(c, 200*time.Millisecond); got != tc.want {
				t.Fatalf("ClosedByServer = %v, want %v", got, tc.want)
			}
		})
	}
}
