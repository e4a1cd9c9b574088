package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
)

const (
	checkpointMagic   = "SLCK"
	checkpointVersion = 1
	checkpointHeader  = 32
	// CheckpointFile is the checkpoint's file name in its directory.
	CheckpointFile = "checkpoint"
)

// ErrNoCheckpoint is returned by ReadCheckpoint when there is none.
var ErrNoCheckpoint = errors.New("wal: no checkpoint")

// Checkpoint says that Payload reflects every record before Position, so
// replay resumes at Position. The payload is the caller's.
type Checkpoint struct {
	Position Position
	Payload  []byte
}

// WriteCheckpoint writes c to dir/checkpoint atomically: a temporary file
// is written and fdatasync'ed, renamed over the old one, and the directory
// is fsync'ed. A crash leaves the old or the new checkpoint, never a mix.
func WriteCheckpoint(dir string, c Checkpoint) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("wal: create %s: %w", dir, err)
	}
	var h [checkpointHeader]byte
	copy(h[0:4], checkpointMagic)
	binary.LittleEndian.PutUint16(h[4:6], checkpointVersion)
	binary.LittleEndian.PutUint64(h[8:16], c.Position.Segment)
	binary.LittleEndian.PutUint64(h[16:24], uint64(c.Position.Offset))
	binary.LittleEndian.PutUint64(h[24:32], uint64(len(c.Payload)))
	sum := crc32.Update(crc32.Checksum(h[:], castagnoli), castagnoli, c.Payload)
	var t [4]byte
	binary.LittleEndian.PutUint32(t[:], sum)

	path := filepath.Join(dir, CheckpointFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("wal: write checkpoint: %w", err)
	}
	for _, b := range [][]byte{h[:], c.Payload, t[:]} {
		if _, err = f.Write(b); err != nil {
			break
		}
	}
	if err == nil {
		err = datasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		_ = os.Remove(tmp) // err says what went wrong; the temporary file is only litter
		return fmt.Errorf("wal: write checkpoint %s: %w", path, err)
	}
	return nil
}

// ReadCheckpoint reads dir/checkpoint. It returns ErrNoCheckpoint when the
// file does not exist and a *CorruptionError when it fails its checks.
func ReadCheckpoint(dir string) (Checkpoint, error) {
	path := filepath.Join(dir, CheckpointFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{}, ErrNoCheckpoint
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("wal: read checkpoint: %w", err)
	}
	return decodeCheckpoint(path, b)
}

func decodeCheckpoint(path string, b []byte) (Checkpoint, error) {
	bad := func(why string) (Checkpoint, error) {
		return Checkpoint{}, &CorruptionError{Path: path, Reason: why}
	}
	if len(b) < checkpointHeader+4 {
		return bad("shorter than its header")
	}
	if string(b[0:4]) != checkpointMagic {
		return bad("bad magic")
	}
	n := binary.LittleEndian.Uint64(b[24:32])
	if n != uint64(len(b)-checkpointHeader-4) {
		return bad(fmt.Sprintf("payload length %d does not match file size %d", n, len(b)))
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return bad("checksum mismatch")
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != checkpointVersion {
		return bad(fmt.Sprintf("unknown version %d", v))
	}
	return Checkpoint{
		Position: Position{
			Segment: binary.LittleEndian.Uint64(b[8:16]),
			Offset:  int64(binary.LittleEndian.Uint64(b[16:24])),
		},
		Payload: b[checkpointHeader : len(b)-4],
	}, nil
}
