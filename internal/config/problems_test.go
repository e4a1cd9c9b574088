package config

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestProblemsBounded: of each severity, the first Keep problems in file
// and line order are kept, whatever the order they come in; the others are
// counted, each once; Lines prints errors, then warnings, then notes, each
// followed by the count of those not kept.
func TestProblemsBounded(t *testing.T) {
	ps := &Problems{Keep: 3}
	var order []int
	for i := range 1000 {
		order = append(order, i)
	}
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, i := range order {
		ps.Warn("f.properties", i+10, fmt.Sprintf("a1.k%d", i), "ignored")
		ps.Warn("f.properties", i+10, fmt.Sprintf("a1.k%d", i), "ignored") // recorded twice, counted once
	}
	ps.Add("f.properties", 900, "a1.bad", "broken")
	ps.Add("f.properties", 5, "a1.worse", "broken too")
	ps.Note("f.properties", 7, "a1.n", "a note")
	if ps.Count(Warning) != 1000 || ps.Count(Error) != 2 || ps.Count(Note) != 1 {
		t.Fatalf("counts: %d warnings, %d errors, %d notes", ps.Count(Warning), ps.Count(Error), ps.Count(Note))
	}
	want := []string{
		"f.properties:5: a1.worse: broken too",
		"f.properties:900: a1.bad: broken",
		"f.properties:10: a1.k0: ignored",
		"f.properties:11: a1.k1: ignored",
		"f.properties:12: a1.k2: ignored",
		"... and 997 more warnings",
		"f.properties:7: a1.n: a note",
	}
	if got := ps.Lines(true); !slices.Equal(got, want) {
		t.Errorf("Lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := ps.Error(); got != strings.Join(slices.Delete(slices.Clone(want), 6, 7), "\n") {
		t.Errorf("Error:\n%s", got)
	}
	if got := ps.Sorted(); len(got) != 6 || got[0].Line != 5 || got[1].Line != 7 || got[5].Line != 900 {
		t.Errorf("Sorted: %v", got)
	}

	all := &Problems{Keep: -1}
	for i := range 250 {
		all.Warn("f", i+1, "k", "w")
	}
	if len(all.Sorted()) != 250 || len(all.Lines(false)) != 250 {
		t.Errorf("Keep -1 kept %d of 250", len(all.Sorted()))
	}
	def := &Problems{}
	for i := range 250 {
		def.Warn("f", i+1, "k", "w")
	}
	if len(def.Sorted()) != DefaultKeep || def.Lines(false)[DefaultKeep] != "... and 150 more warnings" {
		t.Errorf("default: kept %d, last line %q", len(def.Sorted()), def.Lines(false)[DefaultKeep])
	}
	one := &Problems{Keep: 1}
	one.Add("f", 1, "a", "x")
	one.Add("f", 2, "b", "y")
	if l := one.Lines(false); l[1] != "... and 1 more error" {
		t.Errorf("%q", l)
	}
}

// TestProblemsSameKeyKeepOrder: problems on one key and line print in the
// order they were recorded.
func TestProblemsSameKeyKeepOrder(t *testing.T) {
	ps := &Problems{}
	ps.Add("f", 3, "a1.k", "second")
	ps.Add("f", 3, "a1.k", "first")
	if got := ps.Sorted(); got[0].Msg != "second" || got[1].Msg != "first" {
		t.Errorf("%v", got)
	}
}
