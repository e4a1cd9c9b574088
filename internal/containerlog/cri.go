package containerlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// maxHeader bounds the part of a CRI record before its text: a time of at
// most 35 bytes, a stream and a tag, with room for tags to come.
const maxHeader = 128

// ParseCRI parses one record of the CRI logging format (without its
// newline):
//
//	2016-10-06T00:17:09.669794202Z stdout P log content 1
//
// that is the time in RFC 3339 with up to nine fractional digits and an
// offset, the stream, the tags separated by ':' of which the first is P
// (partial: the line goes on in the next record of the stream) or F (full:
// the line ends here), and the text after one space. The kubelet's parser
// takes only the first tag into account and so does this one, so that tags
// added later do not break reading. The text is the container's bytes as
// they were (containerd has already taken "\n" or "\r\n" off the line's
// end; a '\r' left is the container's). Text is a slice of line.
func ParseCRI(line []byte) (Record, error) {
	var r Record
	err := parseCRI(line, nil, &r)
	return r, err
}

// parseCRI is ParseCRI into r (a record as large as this is copied at a
// cost when returned), with the last minute read in m (nil: none).
func parseCRI(line []byte, m *minute, r *Record) error {
	// Most times are UTC with nine fractional digits: 30 bytes, which
	// parseTimeUTC accepts only without a space, so the space after them
	// is the first.
	i := len("2006-01-02T15:04:05.999999999Z")
	ns, ok := int64(0), false
	if len(line) > i && line[i] == ' ' {
		ns, ok = parseTimeUTC(line[:i], m)
	}
	if !ok {
		i = bytes.IndexByte(line[:min(len(line), maxHeader)], ' ')
		if i < 0 {
			return errors.New("no time: a CRI record starts with an RFC 3339 time and a space")
		}
		var err error
		if ns, err = parseTimeIn(line[:i], m); err != nil {
			return err
		}
	}
	r.Time, r.Nanos = line[:i], ns
	rest := line[i+1:]
	// The records the runtimes write, "stdout F text": their first eight
	// bytes read as one word.
	if len(rest) >= 9 && rest[8] == ' ' {
		switch binary.LittleEndian.Uint64(rest) {
		case stdoutF:
			r.Stream, r.Partial, r.Text = Stdout, false, rest[9:]
			return nil
		case stdoutP:
			r.Stream, r.Partial, r.Text = Stdout, true, rest[9:]
			return nil
		case stderrF:
			r.Stream, r.Partial, r.Text = Stderr, false, rest[9:]
			return nil
		case stderrP:
			r.Stream, r.Partial, r.Text = Stderr, true, rest[9:]
			return nil
		}
	}
	j := bytes.IndexByte(rest[:min(len(rest), maxHeader)], ' ')
	if j < 0 {
		return errors.New("no stream after the time")
	}
	s, ok := parseStream(rest[:j])
	if !ok {
		return fmt.Errorf("stream %q is neither stdout nor stderr", trim(rest[:j]))
	}
	r.Stream = s
	rest = rest[j+1:]
	k := bytes.IndexByte(rest[:min(len(rest), maxHeader)], ' ')
	tags := rest
	if k >= 0 {
		tags, rest = rest[:k], rest[k+1:]
	} else if len(rest) <= maxHeader {
		rest = nil // "time stream F" with no text and no space: an empty line
	} else {
		return errors.New("no tag (P or F) after the stream")
	}
	if t, _, _ := bytes.Cut(tags, []byte(":")); len(t) == 1 && t[0] == 'P' {
		r.Partial = true
	} else if len(t) != 1 || t[0] != 'F' {
		return fmt.Errorf("tag %q is neither P nor F", trim(tags))
	}
	r.Text = rest
	return nil
}

// The stream and tag of the records the runtimes write, as ParseCRI loads
// them.
var (
	stdoutF = binary.LittleEndian.Uint64([]byte("stdout F"))
	stdoutP = binary.LittleEndian.Uint64([]byte("stdout P"))
	stderrF = binary.LittleEndian.Uint64([]byte("stderr F"))
	stderrP = binary.LittleEndian.Uint64([]byte("stderr P"))
)

// trim shortens b for an error message.
func trim(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}
