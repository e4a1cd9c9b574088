package config

import (
	"fmt"
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

// Problems collects every problem found so they can be reported at once.
// The zero value is ready to use. It is an error when it holds an Error.
//
// A key whose value could not be resolved (an unset ${env:X}, a failing
// config filter) is broken: its own problem is reported, and any later
// problem about the same key, which could only follow from it, is dropped,
// so that each problem gives one line.
//
// Values read through config filters, and the passwords of URLs written
// with user information, are secrets: Sorted, and so Error, mask them in
// messages (see internal/redact), so that no problem line prints one.
type Problems struct {
	List []Problem

	broken  map[string]bool
	secrets []string
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
	ps.List = append(ps.List, Problem{File: file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...), Severity: sev})
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
	if s != "" && !slices.Contains(ps.secrets, s) {
		ps.secrets = append(ps.secrets, s)
	}
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

// Count returns how many problems of severity sev ps holds.
func (ps *Problems) Count(sev Severity) int {
	if ps == nil {
		return 0
	}
	n := 0
	for _, p := range ps.Sorted() {
		if p.Severity == sev {
			n++
		}
	}
	return n
}

// Sorted returns the problems ordered by file, line and key, without
// duplicates, with secrets replaced in their messages.
func (ps *Problems) Sorted() []Problem {
	out := append([]Problem(nil), ps.List...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Key < b.Key
	})
	dedup := out[:0]
	for i, p := range out {
		if i > 0 && p == out[i-1] {
			continue
		}
		dedup = append(dedup, p)
	}
	if r := redact.Replacer(ps.secrets); r != nil {
		for i := range dedup {
			dedup[i].Msg = r.Replace(dedup[i].Msg)
		}
	}
	return dedup
}

// Error prints one problem per line as FILE:LINE: key: message, errors and
// warnings in file and line order (notes are left out).
func (ps *Problems) Error() string {
	var b strings.Builder
	for _, p := range ps.Sorted() {
		if p.Severity == Note {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}
