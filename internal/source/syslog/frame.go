package syslogsource

import "bytes"

// maxCountDigits bounds the octet count of RFC 6587 framing: a longer
// digit run is not taken as a count, so a count is at most 999,999,999, and
// a frame is never read into memory beyond eventSize whatever it claims.
const maxCountDigits = 9

// frame is one message cut from a TCP stream.
type frame struct {
	line       []byte  // the message without framing (multiport)
	msg        Message // the message as SyslogUtils sees it (syslogtcp)
	valid      bool    // msg holds a message; false: Flume would fail to build one
	incomplete bool    // cut at eventSize
	truncated  bool    // cut short by the end of the connection
}

// framer cuts messages from a TCP stream: newline framing as Flume's sources
// do it, and, when octet is set, RFC 6587 octet counting ("LEN SP MSG") for
// messages that start with a count followed by a space and '<', as the
// syslog senders that use it (logger --octet-count, rsyslog, syslog-ng) send.
type framer struct {
	maxSize int
	octet   bool
	flume   bool // SyslogUtils' newline rules (syslogtcp); else multiport's LineSplitter
}

// next returns the next frame at the start of data. consumed is how many
// bytes it used (on ok=false, the blank lines skipped); skip is how many
// bytes still to come belong to an octet-counted frame cut at eventSize and
// must be discarded. With eof set, whatever is left is a final frame.
func (f framer) next(data []byte, eof bool) (fr frame, consumed, skip int, ok bool) {
	i := 0
	for i < len(data) && data[i] == '\n' {
		i++
	}
	b := data[i:]
	if len(b) == 0 {
		return frame{}, i, 0, false
	}
	if f.octet && b[0] >= '1' && b[0] <= '9' {
		n, j := 0, 0
		for j < len(b) && j <= maxCountDigits && isDigit(b[j]) {
			n = n*10 + int(b[j]-'0')
			j++
		}
		switch {
		case j+1 >= len(b) && j <= maxCountDigits && !eof:
			return frame{}, i, 0, false // cannot tell yet
		case j <= maxCountDigits && j+1 < len(b) && b[j] == ' ' && b[j+1] == '<':
			hdr := j + 1
			take := min(n, f.maxSize)
			if len(b)-hdr < take {
				if !eof {
					return frame{}, i, 0, false
				}
				fr = f.octetFrame(b[hdr:], true)
				fr.truncated = true
				return fr, len(data), 0, true
			}
			return f.octetFrame(b[hdr:hdr+take], n > take), i + hdr + take, n - take, true
		}
	}
	if f.flume {
		m, n, ok := ScanStream(b, f.maxSize)
		if ok {
			return frame{msg: m, valid: true, incomplete: m.Incomplete}, i + n, 0, true
		}
		if !eof {
			return frame{}, i + n, 0, false
		}
		m, ok = ScanDatagram(b[n:], false)
		return frame{msg: m, valid: ok}, len(data), 0, true
	}
	if k := bytes.IndexByte(b[:min(len(b), f.maxSize)], '\n'); k >= 0 {
		return frame{line: b[:k]}, i + k + 1, 0, true
	}
	if len(b) >= f.maxSize {
		return frame{line: b[:f.maxSize], incomplete: true}, i + f.maxSize, 0, true
	}
	if eof {
		return frame{line: b}, len(data), 0, true
	}
	return frame{}, i, 0, false
}

// octetFrame makes a frame of the content of an octet-counted frame: one
// trailing newline, which some senders count in, is dropped; newlines
// inside are message text.
func (f framer) octetFrame(content []byte, incomplete bool) frame {
	if !incomplete && len(content) > 0 && content[len(content)-1] == '\n' {
		content = content[:len(content)-1]
	}
	if !f.flume {
		return frame{line: content, incomplete: incomplete}
	}
	m, ok := ScanDatagram(content, false)
	m.Incomplete, m.Multiline = incomplete, true
	return frame{msg: m, valid: ok, incomplete: incomplete}
}
