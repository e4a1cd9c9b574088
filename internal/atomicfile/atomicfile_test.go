package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// names lists dir's entries, so a test can see that no temporary file is left.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{`{"a":1}`, `{"a":2,"b":"longer than before"}`, ``} {
		if err := WriteFile(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != content {
			t.Fatalf("content %q, want %q", got, content)
		}
		if n := names(t, dir); len(n) != 1 || n[0] != "state.json" {
			t.Fatalf("directory holds %q, want only state.json", n)
		}
	}
}

func TestWriteFilePermissions(t *testing.T) {
	dir := t.TempDir()
	for _, perm := range []fs.FileMode{0o600, 0o644} {
		path := filepath.Join(dir, perm.String())
		if err := WriteFile(path, []byte("x"), perm); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != perm {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), perm)
		}
	}
}

// A write that fails half-way leaves the old content and no temporary file.
func TestWriteFailureKeepsOldContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pos")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, 0o600, func(w io.Writer) error {
		w.Write([]byte("half of the new"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want %v", err, boom)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "old" {
		t.Fatalf("content %q after a failed write, want the old one", got)
	}
	if n := names(t, dir); len(n) != 1 {
		t.Fatalf("directory holds %q after a failed write, want only pos", n)
	}
}

// A directory that cannot take the temporary file fails the write and
// leaves the old content.
func TestWriteFileUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "pos")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chmod(dir, 0o700) }() // so that t.TempDir can remove it
	if err := WriteFile(path, []byte("new"), 0o600); err == nil {
		t.Fatal("a write into a read-only directory succeeded")
	}
	got, _ := os.ReadFile(path)
	if string(got) != "old" {
		t.Fatalf("content %q, want the old one", got)
	}
}

// The temporary files Write makes are recognised by IsTemp, and the files
// beside them are not.
func TestIsTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rec-1.json")
	var tmp string
	stop := errors.New("stop before the rename")
	if err := Write(path, 0o600, func(io.Writer) error {
		for _, n := range names(t, dir) {
			tmp = n
		}
		return stop
	}); !errors.Is(err, stop) {
		t.Fatalf("Write: %v, want the callback's error", err)
	}
	if !strings.HasPrefix(tmp, ".rec-1.json") {
		t.Fatalf("temporary file %q does not start with .rec-1.json", tmp)
	}
	for _, c := range []struct {
		name string
		want bool
	}{
		{tmp, true},
		{".rec-1.json.tmp123", true},
		{"rec-1.json", false},
		{"rec-1.json.tmp", false},
		{".rec-1.json.tmp", false},
		{".rec-1.json.tmpx1", false},
		{".tmp1", false},
		{"a.tmp1", false},
	} {
		if got := IsTemp(c.name); got != c.want {
			t.Errorf("IsTemp(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSyncDirMissing(t *testing.T) {
	if err := SyncDir(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want not exist", err)
	}
}
