package testutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"time"
)

// LogBuffer is a log destination tests read back; safe for concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Count returns how many times substr occurs in what was written.
func (l *LogBuffer) Count(substr string) int { return strings.Count(l.String(), substr) }

// Lines returns how many lines hold substr.
func (l *LogBuffer) Lines(substr string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// Tail returns the last n bytes written ("..." in front when there were
// more), for a failure message that shows the end of a long log.
func (l *LogBuffer) Tail(n int) string {
	s := l.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// Records returns the JSON log records (one a line, as --log-format json
// writes them) whose msg is msg, or every record when msg is "". Lines
// that are not JSON are passed over.
func (l *LogBuffer) Records(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		if msg == "" || rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// ClosedByServer reports whether the server closed c within wait without
// sending anything first.
func ClosedByServer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}
