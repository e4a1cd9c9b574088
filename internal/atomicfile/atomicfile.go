// Package atomicfile replaces small state files (positions, progress,
// journals, spills) so that a crash leaves either the old content or the
// new, never a mix: the new content goes to a temporary file in the same
// directory, which is fsync'ed and renamed over the old name, and then the
// directory is fsync'ed so the rename itself survives a power loss.
package atomicfile

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// tempInfix sits between a file's name and the random suffix of its
// temporary copies: ".NAME.tmp123456".
const tempInfix = ".tmp"

// WriteFile replaces path with data, the file ending up with permissions
// perm (the umask does not apply). On an error path keeps its old content
// (or stays absent) and no temporary file is left, unless the error came
// from syncing the directory after the rename: then path holds data, but a
// power loss may still undo the rename.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path with what write writes, as WriteFile does. write is
// given the temporary file; an error it returns abandons the replacement
// and is returned as it is.
func Write(path string, perm fs.FileMode, write func(w io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+tempInfix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		err = write(f)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp) // err says what went wrong; the temporary file is only litter
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes the entries of dir durable: a rename, a creation or a
// removal in it survives a power loss once SyncDir returns nil.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// IsTemp reports whether name (a base name) is a temporary copy Write
// left behind when the process died before its rename; whoever owns the
// directory may delete such files at its start.
func IsTemp(name string) bool {
	i := strings.LastIndex(name, tempInfix)
	return strings.HasPrefix(name, ".") && i > 1 && allDigits(name[i+len(tempInfix):])
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
