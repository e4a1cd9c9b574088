package config

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a configuration, located at the file and
// line of the key it concerns. Line is 0 when the problem has no single line
// (a missing property is reported at its component's type line).
type Problem struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Key, p.Msg)
}

// Problems collects every problem found so they can be reported at once.
// The zero value is ready to use. It is an error when it holds any problem.
type Problems struct {
	List []Problem
}

// Add records a problem.
func (ps *Problems) Add(file string, line int, key, format string, args ...any) {
	ps.List = append(ps.List, Problem{File: file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Err returns ps as an error, or nil when there is no problem.
func (ps *Problems) Err() error {
	if ps == nil || len(ps.List) == 0 {
		return nil
	}
	return ps
}

// Sorted returns the problems ordered by file, line and key, without duplicates.
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
	return dedup
}

// Error prints one problem per line as FILE:LINE: key: message.
func (ps *Problems) Error() string {
	var b strings.Builder
	for i, p := range ps.Sorted() {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}
