package agent

import (
	"os"
	"strings"
	"testing"
)

// TestMigrationDocListsTables keeps docs/migrating-from-flume.md true to
// the tables it documents: every Flume type sluice lacks, and every Flume
// key it ignores by design.
func TestMigrationDocListsTables(t *testing.T) {
	b, err := os.ReadFile("../../docs/migrating-from-flume.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.ToLower(string(b))
	for kt := range missingTypes {
		_, typ, _ := strings.Cut(kt, ":")
		found := strings.Contains(doc, "`"+typ+"`")
		for class, c := range missingClassNames {
			if c == typ {
				short := class[strings.LastIndex(class, ".")+1:]
				found = found || strings.Contains(doc, short)
			}
		}
		if !found {
			t.Errorf("the migration page does not list the Flume type %s", kt)
		}
	}
	for kt, keys := range ignoredKeys {
		for k := range keys {
			if !strings.Contains(doc, "`"+strings.ToLower(k)+"`") {
				t.Errorf("the migration page does not list %s's ignored key %s", kt, k)
			}
		}
	}
	for _, groups := range refusedGroups {
		for _, g := range groups {
			if !strings.Contains(doc, "`"+g.prefix+"*`") {
				t.Errorf("the migration page does not list the refused group %s*", g.prefix)
			}
		}
	}
}
