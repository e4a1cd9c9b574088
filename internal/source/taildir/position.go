package taildirsource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/atomicfile"
)

// position is one entry of the position file: Flume's
// {"inode":N,"pos":N,"file":"/abs/path"}. Nothing else is written, because
// Flume's reader fails on a key it does not know, and a position file must
// stay readable by Flume (to go back) as Flume's is by sluice.
type position struct {
	Inode uint64 `json:"inode"`
	Pos   int64  `json:"pos"`
	File  string `json:"file"`
}

// fingerprint is what sluice keeps about a position beyond Flume's three
// fields, in a file of its own next to the position file (positionFile +
// ".sluice"): the device, and a hash of the bytes before the position, so that
// after a restart a file truncated or replaced (an inode reused) while the
// source was stopped is told apart from the file the position was for. It
// applies only while the position file still holds the same inode, pos and
// file (Flume may have run in between).
type fingerprint struct {
	Dev   uint64 `json:"dev"`
	Inode uint64 `json:"inode"`
	Pos   int64  `json:"pos"`
	File  string `json:"file"`
	// SigLen bytes before Pos have the FNV-1a hash SigSum.
	SigLen int    `json:"sigLen,omitempty"`
	SigSum uint64 `json:"sigSum,omitempty"`
	// Piece is how many pieces of the line at Pos were sent, when that
	// line is longer than maxLineLength (0 at a line's start).
	Piece int `json:"piece,omitempty"`
	// Of a file of container log records (recState): the pieces sent of
	// each stream's line in progress, how many events cut from Pos were
	// sent, and whether its last lines are being sent as they are.
	Pieces []int `json:"pieces,omitempty"`
	Sent   int   `json:"sent,omitempty"`
	Flush  bool  `json:"flush,omitempty"`
}

// recState returns the record state the fingerprint keeps.
func (f fingerprint) recState() recState {
	var st recState
	copy(st.pieces[:], f.Pieces)
	st.sent, st.flush = f.Sent, f.Flush
	return st
}

// keepRecState sets the record state of st in the fingerprint.
func (f *fingerprint) keepRecState(st recState) {
	if st.pieces != [len(st.pieces)]int{} {
		f.Pieces = st.pieces[:]
	}
	f.Sent, f.Flush = st.sent, st.flush
}

func sidecar(positionFile string) string { return positionFile + ".sluice" }

// loadFingerprints reads the side file; any problem just means no
// fingerprints (positions then work as in Flume).
func loadFingerprints(positionFile string) map[position]fingerprint {
	data, err := os.ReadFile(sidecar(positionFile))
	if err != nil || len(data) > maxPositionFile {
		return nil
	}
	var fps []fingerprint
	if json.Unmarshal(data, &fps) != nil {
		return nil
	}
	out := make(map[position]fingerprint, len(fps))
	for _, f := range fps {
		if f.SigLen >= 0 && f.SigLen <= sigLen && f.Piece >= 0 && f.Sent >= 0 && len(f.Pieces) <= 2 && !slices.ContainsFunc(f.Pieces, func(n int) bool { return n < 0 }) {
			out[position{Inode: f.Inode, Pos: f.Pos, File: f.File}] = f
		}
	}
	return out
}

// maxPositionFile bounds what is read of a position file: 64 MiB is about
// half a million entries.
const maxPositionFile = 64 << 20

// loadPositions reads a position file. A missing or empty file (Flume leaves
// an empty one when it tails nothing) means no positions.
func loadPositions(path string) ([]position, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parsePositions(data)
}

// parsePositions parses a position file's content. Numbers may be JSON
// numbers or strings holding numbers (Gson's reader accepts both, and some
// Flume builds write strings); unknown keys are ignored.
func parsePositions(data []byte) ([]position, error) {
	if len(data) > maxPositionFile {
		return nil, fmt.Errorf("position file is %d bytes, more than the %d a position file can sensibly hold", len(data), maxPositionFile)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("position file is not a JSON array of {\"inode\",\"pos\",\"file\"} objects: %w", err)
	}
	out := make([]position, 0, len(raw))
	for i, m := range raw {
		var p position
		var err error
		if p.Inode, err = jsonUint(m["inode"]); err != nil {
			return nil, fmt.Errorf("entry %d: inode: %w", i, err)
		}
		pos, err := jsonUint(m["pos"])
		if err != nil {
			return nil, fmt.Errorf("entry %d: pos: %w", i, err)
		}
		if pos > 1<<62 {
			return nil, fmt.Errorf("entry %d: pos %d is not a file position", i, pos)
		}
		p.Pos = int64(pos)
		if err := json.Unmarshal(m["file"], &p.File); err != nil || p.File == "" {
			return nil, fmt.Errorf("entry %d: file is missing or not a string", i)
		}
		out = append(out, p)
	}
	return out, nil
}

func jsonUint(v json.RawMessage) (uint64, error) {
	if len(v) == 0 {
		return 0, errors.New("missing")
	}
	s := string(v)
	if v[0] == '"' {
		if err := json.Unmarshal(v, &s); err != nil {
			return 0, err
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not a non-negative whole number", v)
	}
	return n, nil
}

// encodePositions renders entries as Flume writes them.
func encodePositions(entries []position) []byte {
	if entries == nil {
		entries = []position{}
	}
	b, _ := json.Marshal(entries) // cannot fail: plain structs
	return b
}

// savePositions writes the position file if a position changed.
func (t *tailer) savePositions() {
	if !t.posDirty {
		return
	}
	t.newFiles, t.lastSave = false, time.Now()
	entries := make([]position, 0, len(t.files))
	fps := make([]fingerprint, 0, len(t.files))
	for _, tf := range t.files {
		if tf.spill != "" {
			continue // not a file of the groups: the spill file itself says what is left
		}
		entries = append(entries, position{Inode: tf.key.ino, Pos: tf.pos, File: tf.path})
		fp := fingerprint{Dev: tf.key.dev, Inode: tf.key.ino, Pos: tf.pos, File: tf.path, SigLen: tf.sig.n, SigSum: tf.sig.sum, Piece: tf.piece}
		if tf.cl != nil {
			fp.keepRecState(tf.cl.st)
		}
		fps = append(fps, fp)
	}
	slices.SortFunc(entries, func(a, b position) int { return cmpString(a.File, b.File) })
	slices.SortFunc(fps, func(a, b fingerprint) int { return cmpString(a.File, b.File) })
	data := encodePositions(entries)
	t.posDirty = false
	if bytes.Equal(data, t.lastSaved) {
		return
	}
	// The side file first: if only it is written, its entries no longer
	// match the old positions and are ignored.
	fpData, _ := json.Marshal(fps)
	err := atomicfile.WriteFile(sidecar(t.s.positionFile), fpData, 0o600)
	if err == nil {
		err = atomicfile.WriteFile(t.s.positionFile, data, 0o600)
	}
	if err != nil {
		t.posDirty = true
		t.log.Error("taildir source cannot write its position file", "file", t.s.positionFile, "err", err)
		return
	}
	t.lastSaved = data
}
