// Package containerlog reads the files container runtimes write for
// Kubernetes: the CRI format of containerd and CRI-O, Docker's json-file
// format, and the names the kubelet gives those files. It holds parsers of
// single records and of paths, with no state: joining the pieces of a long
// line, positions and rotation belong to the source that reads the files
// (the taildir source).
package containerlog

import (
	"bytes"
	"errors"
)

// Stream is the output a record was written to.
type Stream uint8

const (
	Stdout Stream = iota
	Stderr
	// Streams is how many streams there are: a reader keeps one line in
	// progress for each.
	Streams = 2
)

// String returns the stream's name as the runtimes write it.
func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

func parseStream(b []byte) (Stream, bool) {
	switch string(b) {
	case "stdout":
		return Stdout, true
	case "stderr":
		return Stderr, true
	}
	return 0, false
}

// Record is one line of a container log file: a piece of what a container
// wrote to one stream. The runtime cuts a long line into records marked
// partial, each followed by more of the line, the last not partial: the
// line is the Text of those records of its stream joined.
type Record struct {
	// Time is the time the runtime wrote the record, as it wrote it
	// (RFC 3339, up to nanoseconds); Nanos is that time in Unix nanoseconds.
	Time  []byte
	Nanos int64
	// Stream is stdout or stderr.
	Stream Stream
	// Partial is set when the line goes on in the next record of Stream.
	Partial bool
	// Text is the container's bytes, without the line end.
	Text []byte
}

// Format is a container log file format.
type Format uint8

const (
	// Unknown is not a container log format.
	Unknown Format = iota
	// CRI is "<time> <stream> <P|F> <text>", written by containerd and CRI-O.
	CRI
	// Docker is dockerd's json-file format: {"log":"...","stream":"...","time":"..."}.
	Docker
)

// String returns the format's name as configured ("cri", "docker").
func (f Format) String() string {
	switch f {
	case CRI:
		return "cri"
	case Docker:
		return "docker"
	}
	return "unknown"
}

// Detect tells the format of a file from its first line (without its
// newline): Unknown when it is a record of neither.
func Detect(line []byte) Format {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > 0 && line[0] == '{' {
		if _, err := ParseDocker(line); err == nil {
			return Docker
		}
		return Unknown
	}
	if _, err := ParseCRI(line); err == nil {
		return CRI
	}
	return Unknown
}

// Parse parses line (without its newline) as a record of format f.
func Parse(f Format, line []byte) (Record, error) {
	var r Record
	err := (&Parser{Format: f}).Parse(line, &r)
	return r, err
}

// A Parser parses the records of one file, one after the other, as Parse
// does. It remembers the minute of the last time it read: a file's
// records come many to a minute, and the time of the next is then read
// from its seconds on.
type Parser struct {
	Format Format
	last   minute
}

// Parse parses line (without its newline) as a record of p's format into
// r (a record is a dozen words: filled in place rather than copied out).
func (p *Parser) Parse(line []byte, r *Record) error {
	switch p.Format {
	case CRI:
		return parseCRI(line, &p.last, r)
	case Docker:
		var err error
		*r, err = parseDocker(line, &p.last)
		return err
	}
	*r = Record{}
	return errors.New("not a container log format")
}
