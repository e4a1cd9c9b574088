package spooldirsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"github.com/sluicehq/sluice/internal/atomicfile"
)

// progressName is the progress file in trackerDir. It says how far the
// source got in each file it started and has not finished:
//
//	{"files":[{"file":"/spool/a.log","dev":2049,"ino":131,"pos":5678,"lines":90,
//	           "size":9999,"mtime":1700000000000000000}]}
//
// Every line of file before byte pos was committed to the channels (lines
// counts them). dev and ino tell the file from another one given the same
// name; size and mtime are what the file had when reading began. An entry
// whose file changed while it was read also says how in "changed". The file
// is rewritten atomically after every committed batch; usually it holds
// the one file being read, plus any file left because it changed.
const progressName = ".sluice-spool-progress.json"

// entry is the progress in one file.
type entry struct {
	File    string `json:"file"`
	Dev     uint64 `json:"dev,omitempty"`
	Ino     uint64 `json:"ino,omitempty"`
	Pos     int64  `json:"pos"`
	Lines   int64  `json:"lines,omitempty"`
	Size    int64  `json:"size"`
	MTime   int64  `json:"mtime"`
	Changed string `json:"changed,omitempty"`
}

// progressDoc is the progress file's content. File, Pos, Size and MTime at
// the top level are the format sluice wrote before (one file, no inode),
// still read.
type progressDoc struct {
	Files []entry `json:"files"`
	File  string  `json:"file,omitempty"`
	Pos   int64   `json:"pos,omitempty"`
	Size  int64   `json:"size,omitempty"`
	MTime int64   `json:"mtime,omitempty"`
}

// fileKey identifies a file whatever its name.
type fileKey struct{ dev, ino uint64 }

func keyOf(st fs.FileInfo) fileKey {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return fileKey{dev: uint64(sys.Dev), ino: sys.Ino}
	}
	return fileKey{}
}

// sameFile reports whether e was written for the file with key k. An
// entry of the older format has no inode and is taken by name.
func (e *entry) sameFile(k fileKey) bool {
	return e.Ino == 0 || (e.Dev == k.dev && e.Ino == k.ino)
}

// progress is the source's progress file in memory.
type progress struct {
	path    string
	entries []entry
}

// loadProgress reads the progress file; a missing one is empty progress.
func loadProgress(path string) (*progress, error) {
	p := &progress{path: path}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	var doc progressDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return p, fmt.Errorf("not a progress file: %w", err)
	}
	for _, e := range doc.Files {
		if e.File != "" && e.Pos >= 0 {
			p.entries = append(p.entries, e)
		}
	}
	if doc.File != "" && doc.Pos >= 0 && p.get(doc.File) == nil {
		p.entries = append(p.entries, entry{File: doc.File, Pos: doc.Pos, Size: doc.Size, MTime: doc.MTime})
	}
	return p, nil
}

// get returns the entry of path, or nil.
func (p *progress) get(path string) *entry {
	for i := range p.entries {
		if p.entries[i].File == path {
			return &p.entries[i]
		}
	}
	return nil
}

// set records e, replacing the entry of the same file.
func (p *progress) set(e entry) {
	if old := p.get(e.File); old != nil {
		*old = e
		return
	}
	p.entries = append(p.entries, e)
}

// remove forgets path and reports whether it had an entry.
func (p *progress) remove(path string) bool {
	n := len(p.entries)
	p.entries = slices.DeleteFunc(p.entries, func(e entry) bool { return e.File == path })
	return len(p.entries) != n
}

// prune forgets the files that keep returns false for, and reports
// whether it forgot any.
func (p *progress) prune(keep func(e *entry) bool) bool {
	n := len(p.entries)
	p.entries = slices.DeleteFunc(p.entries, func(e entry) bool { return !keep(&e) })
	return len(p.entries) != n
}

// save writes the progress file: temporary file, fsync, rename, fsync of
// the directory, so a crash leaves the old or the new content.
func (p *progress) save() error {
	doc := progressDoc{Files: p.entries}
	if doc.Files == nil {
		doc.Files = []entry{}
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(p.path, data, 0o600)
}
