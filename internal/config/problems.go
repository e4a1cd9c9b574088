package config

import (
	"container/heap"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/internal/redact"
)

// Severity says what a Problem does to a configuration.
type Severity int

const (
	// Error: the configuration is refused.
	Error Severity = iota
	// Warning: the configuration runs, but something in it is ignored that
	// the user probably meant (a key sluice does not read, a component not
	// listed, a key set twice). `sluice validate --strict` refuses these.
	Warning
	// Note: something Flume reads that sluice deliberately does without
	// (JVM or Netty tuning); logged at INFO, never refused.
	Note
)

func (s Severity) String() string {
	switch s {
	case Warning:
		return "warning"
	case Note:
		return "note"
	}
	return "error"
}

// Problem is one thing wrong with a configuration, located at the file and
// line of the key it concerns. Line is 0 when the problem has no line of
// its own (the file sets no key of the agent, or lacks a list); it then
// names the file only.
type Problem struct {
	File     string
	Line     int
	Key      string
	Msg      string
	Severity Severity
}

// String prints the problem as FILE:LINE: key: message, or FILE: key:
// message when it has no line.
func (p Problem) String() string {
	if p.Line <= 0 {
		return fmt.Sprintf("%s: %s: %s", p.File, p.Key, p.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Key, p.Msg)
}

// DefaultKeep is how many problems of each severity a Problems keeps to
// print: the first in file and line order. The others are counted.
const DefaultKeep = 100

// Problems collects every problem found so they can be reported at once.
// The zero value is ready to use. It is an error when it holds an Error.
//
// Its memory is bounded whatever the configuration: of each severity it
// keeps the first Keep problems in file and line order (what validate and
// the agent print, errors first) and only counts the others, once each
// (a problem recorded twice counts once). A 15 MB file with 300,000 unknown
// keys costs it a counter and an 8-byte hash a problem, not their text.
//
// A key whose value could not be resolved (an unset ${env:X}, a failing
// config filter) is broken: its own problem is reported, and any later
// problem about the same key, which could only follow from it, is dropped,
// so that each problem gives one line.
//
// Values read through config filters, and the passwords of URLs written
// with user information, are secrets: Sorted, Lines and Error mask them in
// messages (see internal/redact), so that no problem line prints one.
type Problems struct {
	// Keep is how many problems of each severity are kept to print; 0
	// means DefaultKeep, a negative number all of them. Set it before the
	// first problem is recorded.
	Keep int

	kept  [numSeverities]keptHeap
	count [numSeverities]int
	seen  map[uint64]struct{} // hashes of the problems recorded, for counting each once
	seed  maphash.Seed
	seq   int // problems recorded, to order those on one key by when they came

	broken     map[string]bool
	secrets    []string
	secretSeen map[string]bool
}

const numSeverities = int(Note) + 1

// kept is a problem held to print, with the order it was recorded in.
type kept struct {
	p   Problem
	seq int
}

func (a kept) before(b kept) bool {
	if a.p.File != b.p.File {
		return a.p.File < b.p.File
	}
	if a.p.Line != b.p.Line {
		return a.p.Line < b.p.Line
	}
	if a.p.Key != b.p.Key {
		return a.p.Key < b.p.Key
	}
	return a.seq < b.seq
}

// keptHeap is a max-heap in print order: its root is the problem printed
// last, the one a problem printed earlier replaces when the heap is full.
type keptHeap []kept

func (h keptHeap) Len() int           { return len(h) }
func (h keptHeap) Less(i, j int) bool { return h[j].before(h[i]) }
func (h keptHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keptHeap) Push(x any)        { *h = append(*h, x.(kept)) }
func (h *keptHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Add records an error.
func (ps *Problems) Add(file string, line int, key, format string, args ...any) {
	ps.add(Error, file, line, key, format, args...)
}

// Warn records a warning.
func (ps *Problems) Warn(file string, line int, key, format string, args ...any) {
	ps.add(Warning, file, line, key, format, args...)
}

// Note records a note.
func (ps *Problems) Note(file string, line int, key, format string, args ...any) {
	ps.add(Note, file, line, key, format, args...)
}

func (ps *Problems) add(sev Severity, file string, line int, key, format string, args ...any) {
	if ps.broken[key] {
		return
	}
	p := Problem{File: file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...), Severity: sev}
	if ps.seen == nil {
		ps.seen, ps.seed = map[uint64]struct{}{}, maphash.MakeSeed()
	}
	h := maphash.Comparable(ps.seed, p)
	if _, dup := ps.seen[h]; dup {
		return
	}
	ps.seen[h] = struct{}{}
	ps.count[sev]++
	ps.seq++
	k, hp := kept{p, ps.seq}, &ps.kept[sev]
	switch limit := ps.keep(); {
	case limit < 0 || hp.Len() < limit:
		heap.Push(hp, k)
	case hp.Len() > 0 && k.before((*hp)[0]):
		(*hp)[0] = k
		heap.Fix(hp, 0)
	}
}

func (ps *Problems) keep() int {
	if ps.Keep == 0 {
		return DefaultKeep
	}
	return ps.Keep
}

// Broken marks key as broken: later problems about it are dropped.
func (ps *Problems) Broken(key string) {
	if ps.broken == nil {
		ps.broken = map[string]bool{}
	}
	ps.broken[key] = true
}

// IsBroken reports whether key was marked broken.
func (ps *Problems) IsBroken(key string) bool { return ps.broken[key] }

// Secret records a value that must never be printed.
func (ps *Problems) Secret(s string) {
	if s == "" || ps.secretSeen[s] {
		return
	}
	if ps.secretSeen == nil {
		ps.secretSeen = map[string]bool{}
	}
	ps.secretSeen[s] = true
	ps.secrets = append(ps.secrets, s)
}

// Secrets returns the values recorded as secret, longest first.
func (ps *Problems) Secrets() []string {
	out := append([]string(nil), ps.secrets...)
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Err returns ps as an error when it holds an Error, or nil.
func (ps *Problems) Err() error {
	if ps == nil || ps.Count(Error) == 0 {
		return nil
	}
	return ps
}

// Count returns how many problems of severity sev were recorded (each
// once), kept or not.
func (ps *Problems) Count(sev Severity) int {
	if ps == nil {
		return 0
	}
	return ps.count[sev]
}

// Sorted returns the problems kept (all of them, unless there are more
// than Keep of a severity) ordered by file, line and key, with secrets
// masked in their messages.
func (ps *Problems) Sorted() []Problem {
	if ps == nil {
		return nil
	}
	var all []kept
	for sev := range ps.kept {
		all = append(all, ps.kept[sev]...)
	}
	return ps.print(all)
}

// print orders ks and masks the secrets in their messages.
func (ps *Problems) print(ks []kept) []Problem {
	slices.SortFunc(ks, func(a, b kept) int {
		if a.before(b) {
			return -1
		}
		return 1
	})
	out := make([]Problem, len(ks))
	r := redact.Replacer(ps.secrets)
	for i, k := range ks {
		out[i] = k.p
		if r != nil {
			out[i].Msg = r.Replace(out[i].Msg)
		}
	}
	return out
}

// Lines returns the problems as validate prints them, one a line
// (FILE:LINE: key: message): the errors, then the warnings, then (with
// notes) the notes, each in file and line order; after the kept ones of a
// severity, a line "... and N more warnings" counts those not kept.
func (ps *Problems) Lines(notes bool) []string {
	if ps == nil {
		return nil
	}
	var out []string
	for _, sev := range []Severity{Error, Warning, Note} {
		if sev == Note && !notes {
			continue
		}
		for _, p := range ps.print(append([]kept(nil), ps.kept[sev]...)) {
			out = append(out, p.String())
		}
		switch more := ps.count[sev] - len(ps.kept[sev]); {
		case more == 1:
			out = append(out, fmt.Sprintf("... and 1 more %s", sev))
		case more > 1:
			out = append(out, fmt.Sprintf("... and %d more %ss", more, sev))
		}
	}
	return out
}

// Error prints Lines without notes: the errors, then the warnings.
func (ps *Problems) Error() string { return strings.Join(ps.Lines(false), "\n") }
