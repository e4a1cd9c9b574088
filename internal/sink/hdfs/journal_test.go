package hdfssink

import (
	"os"
	"path/filepath"
	"testing"
)

// A journal put that a crash cut short leaves a temporary file beside the
// records; the next start reads the records and deletes the leftovers,
// whether named as atomicfile names them or as earlier versions did.
func TestJournalListDropsCutPuts(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	rec := &record{ID: j.newID(), Store: "file://", InUse: "/x/a.tmp", Target: "/x/a"}
	if err := j.put(rec); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	leftovers := []string{"." + rec.ID + ".json.tmp2871536", "old-000001.json.tmp"}
	for _, n := range leftovers {
		if err := os.WriteFile(filepath.Join(open, n), []byte(`{"id":"half`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := j.list()
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || *rs[0] != *rec {
		t.Fatalf("list %+v, want the one record %+v", rs, rec)
	}
	ents, _ := os.ReadDir(open)
	if len(ents) != 1 || ents[0].Name() != rec.ID+".json" {
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		t.Fatalf("journal directory holds %q, want only %s.json", got, rec.ID)
	}
	fi, _ := os.Stat(filepath.Join(open, rec.ID+".json"))
	if fi.Mode().Perm() != 0o644 {
		t.Fatalf("record mode %v, want 0644 as before", fi.Mode().Perm())
	}
}
