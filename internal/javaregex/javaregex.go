// Package javaregex says why a regular expression written for Java (as in
// Flume configurations) does not compile with Go's RE2, naming the Java
// construct RE2 lacks, so that a configuration error can tell the user what
// to rewrite.
package javaregex

import (
	"errors"
	"regexp/syntax"
	"strings"
)

// Unsupported names the java.util.regex construct behind a RE2 compile error,
// or returns "" when the pattern is invalid in Java too (as far as we can
// tell).
func Unsupported(err error) string {
	var se *syntax.Error
	if !errors.As(err, &se) {
		return ""
	}
	e := se.Expr
	switch se.Code {
	case syntax.ErrInvalidPerlOp:
		switch {
		case strings.HasPrefix(e, "(?="), strings.HasPrefix(e, "(?!"):
			return "lookahead " + e + "...)"
		case strings.HasPrefix(e, "(?>"):
			return "an atomic group (?>...)"
		case strings.HasPrefix(e, "(?"):
			return "the inline flag " + e + " (RE2 has only i, m, s and U)"
		}
	case syntax.ErrInvalidNamedCapture:
		if strings.HasPrefix(e, "(?<=") || strings.HasPrefix(e, "(?<!") {
			return "lookbehind " + e[:4] + "...)"
		}
	case syntax.ErrInvalidEscape:
		switch {
		case len(e) == 2 && e[1] >= '1' && e[1] <= '9':
			return "the backreference " + e
		case e == `\k`:
			return `the named backreference \k<name>`
		case len(e) == 2 && strings.ContainsRune("GZRhHXecNV", rune(e[1])):
			return "the escape " + e
		}
	case syntax.ErrInvalidRepeatOp:
		if strings.HasSuffix(e, "+") {
			return "the possessive quantifier " + e
		}
	case syntax.ErrInvalidCharRange:
		if strings.HasPrefix(e, `\p`) || strings.HasPrefix(e, `\P`) {
			return "the Java character class " + e + " (RE2 knows Unicode classes such as \\p{L} and POSIX classes such as [[:alpha:]])"
		}
	}
	return ""
}
