package filechannel

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// A Flume config run as it is points sluice's file channel at the
// directories where Flume's own file channel kept its events: checkpointDir
// (checkpoint, checkpoint.meta, inflightputs, inflighttakes) and dataDirs
// (log-N, log-N.meta), in a format sluice does not read. Starting over them
// would strand what Flume held there without a word, so Start looks for
// them first.

// flumeLog matches a Flume file channel log file (not its .meta).
var flumeLog = regexp.MustCompile(`^log-[0-9]+$`)

// flumeData is what Flume's file channel left in a channel's directories.
type flumeData struct {
	files  []string // Flume's files found, for the message
	events int64    // events at Flume's last checkpoint; -1: cannot tell
	why    string   // when events is -1, why not
}

// findFlumeData looks for Flume's file channel files in ckDir and dataDirs.
// No files: a zero flumeData.
func findFlumeData(ckDir string, dataDirs []string) (flumeData, error) {
	var fd flumeData
	for _, d := range dataDirs {
		ents, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fd, err
		}
		for _, e := range ents {
			if flumeLog.MatchString(e.Name()) {
				fd.files = append(fd.files, filepath.Join(d, e.Name()))
			}
		}
	}
	// sluice's own checkpoint is called "checkpoint" too: Flume's is known
	// by the files beside it.
	meta := filepath.Join(ckDir, "checkpoint.meta")
	_, metaErr := os.Stat(meta)
	if metaErr == nil {
		fd.files = append(fd.files, meta)
	}
	var inflight []string
	for _, name := range []string{"inflightputs", "inflighttakes"} {
		path := filepath.Join(ckDir, name)
		if st, err := os.Stat(path); err == nil {
			fd.files = append(fd.files, path)
			if st.Size() > 0 { // Flume truncates it when no transaction is open
				inflight = append(inflight, name)
			}
		}
	}
	if len(fd.files) == 0 {
		return fd, nil
	}
	if len(inflight) > 0 {
		fd.events, fd.why = -1, strings.Join(inflight, " and ")+" list transactions that were open when Flume stopped"
		return fd, nil
	}
	if metaErr != nil {
		fd.events, fd.why = -1, "there is no checkpoint.meta to count its events"
		return fd, nil
	}
	n, err := flumeQueueSize(meta)
	if err != nil {
		fd.events, fd.why = -1, fmt.Sprintf("%s cannot be read (%v)", meta, err)
		return fd, nil
	}
	fd.events = n
	return fd, nil
}

// flumeQueueSize reads queueSize from a Flume checkpoint.meta: one
// length-delimited protobuf Checkpoint (filechannel.proto), queueSize its
// field 3, an sfixed32.
func flumeQueueSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReader(io.LimitReader(f, 1<<20))
	size, err := binary.ReadUvarint(r)
	if err != nil || size > 1<<20 {
		return 0, errors.New("no message length")
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, err
	}
	found := false
	var queueSize int64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 3 && typ == protowire.Fixed32Type {
			v, n := protowire.ConsumeFixed32(b)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			queueSize, found = int64(int32(v)), true
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if !found || queueSize < 0 {
		return 0, errors.New("no queueSize")
	}
	return queueSize, nil
}

// flumeDataError is the refusal to start over Flume's events.
func (fd flumeData) err(channel string) error {
	what := fmt.Sprintf("%d events at its last checkpoint", fd.events)
	if fd.events < 0 {
		what = "events sluice cannot count: " + fd.why
	}
	return fmt.Errorf("file channel %s: its directories hold Flume's own file channel (%s), with %s. "+
		"sluice does not read Flume's format, and starting here would strand those events: drain them with Flume first "+
		"(stop its sources and let its sinks empty the channel), or point checkpointDir and dataDirs at new directories",
		channel, shortList(fd.files), what)
}

// shortList names up to three files.
func shortList(files []string) string {
	if len(files) <= 3 {
		return strings.Join(files, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(files[:3], ", "), len(files)-3)
}
