package elasticsearchsink

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

// indexTemplate is a compiled index name: literal text, %{header} values
// and time escapes (the escapes of Flume's BucketPath that make sense in an
// index name), then, with Flume's default TimeBasedIndexNameBuilder, the
// suffix "-" + the event's date in dateFormat.
type indexTemplate struct {
	source string // the name as configured
	parts  []indexPart
	suffix string // Go layout of the date suffix, "" for none
	loc    *time.Location
	static string // the whole name when it has no escape and no suffix
	timed  bool   // uses the event time
}

type indexPart struct {
	kind byte   // 'l' literal, 'h' header, 't' time layout, 's' unix seconds
	text string // literal, header name, or Go time layout
}

// timeEscapes maps BucketPath's time escapes to Go layouts.
var timeEscapes = map[byte]string{
	'a': "Mon", 'A': "Monday", 'b': "Jan", 'B': "January", 'd': "02", 'e': "_2",
	'D': "01/02/06", 'H': "15", 'I': "03", 'j': "002", 'm': "01", 'M': "04",
	'p': "PM", 'S': "05", 'y': "06", 'Y': "2006", 'z': "-0700", 'k': "15", 'l': "3", 'n': "1",
}

// parseIndex compiles name. suffix is the Go layout of the daily suffix or
// "" for none.
func parseIndex(name, suffix string, loc *time.Location) (*indexTemplate, error) {
	t := &indexTemplate{source: name, suffix: suffix, loc: loc}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, indexPart{kind: 'l', text: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '%' {
			lit.WriteByte(c)
			continue
		}
		if i+1 >= len(name) {
			return nil, fmt.Errorf("%q ends with a lone %%; write %%%% for a literal %%", name)
		}
		i++
		switch e := name[i]; e {
		case '%':
			lit.WriteByte('%')
		case '{':
			end := strings.IndexByte(name[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%q has %%{ without a closing }", name)
			}
			h := name[i+1 : i+end]
			if h == "" {
				return nil, fmt.Errorf("%q has an empty %%{}", name)
			}
			flush()
			t.parts = append(t.parts, indexPart{kind: 'h', text: h})
			i += end
		case 's':
			flush()
			t.parts = append(t.parts, indexPart{kind: 's'})
			t.timed = true
		default:
			layout, ok := timeEscapes[e]
			if !ok {
				return nil, fmt.Errorf("%q has the unknown escape %%%c; use %%{header}, a time escape such as %%Y %%m %%d %%H, or %%%% for %%", name, e)
			}
			flush()
			t.parts = append(t.parts, indexPart{kind: 't', text: layout})
			t.timed = true
		}
	}
	flush()
	if suffix != "" {
		t.timed = true
	}
	if len(t.parts) == 0 {
		return nil, fmt.Errorf("the index name is empty")
	}
	if !t.timed && len(t.parts) == 1 && t.parts[0].kind == 'l' {
		t.static = t.parts[0].text
	}
	return t, nil
}

// hasTimeEscape reports whether the template itself formats the time.
func (t *indexTemplate) hasTimeEscape() bool {
	for _, p := range t.parts {
		if p.kind == 't' || p.kind == 's' {
			return true
		}
	}
	return false
}

// appendName appends the index name for an event with headers h and time
// ms (milliseconds). A missing header expands to "" as in Flume.
func (t *indexTemplate) appendName(dst []byte, h event.Headers, ms int64) []byte {
	if t.static != "" {
		return append(dst, t.static...)
	}
	var tm time.Time
	if t.timed {
		tm = time.UnixMilli(ms).In(t.loc)
	}
	for _, p := range t.parts {
		switch p.kind {
		case 'l':
			dst = append(dst, p.text...)
		case 'h':
			dst = append(dst, h.Value(p.text)...)
		case 't':
			dst = tm.AppendFormat(dst, p.text)
		case 's':
			dst = fmt.Appendf(dst, "%d", tm.Unix())
		}
	}
	if t.suffix != "" {
		dst = append(dst, '-')
		dst = tm.AppendFormat(dst, t.suffix)
	}
	return dst
}

// javaDateLayout converts a Java SimpleDateFormat pattern made of the
// common fields (yyyy yy MM dd HH mm ss SSS, quoted literals) to a Go
// layout, as Flume's TimeBasedIndexNameBuilder dateFormat takes one.
func javaDateLayout(p string) (string, error) {
	fields := []struct{ java, goLayout string }{
		{"yyyy", "2006"}, {"yy", "06"}, {"MM", "01"}, {"dd", "02"}, {"HH", "15"},
		{"mm", "04"}, {"ss", "05"}, {"SSS", "000"},
	}
	var b strings.Builder
	for i := 0; i < len(p); {
		if p[i] == '\'' {
			end := strings.IndexByte(p[i+1:], '\'')
			if end < 0 {
				return "", fmt.Errorf("%q has an unclosed quote", p)
			}
			b.WriteString(p[i+1 : i+1+end])
			i += end + 2
			continue
		}
		matched := false
		for _, f := range fields {
			if strings.HasPrefix(p[i:], f.java) {
				b.WriteString(f.goLayout)
				i += len(f.java)
				matched = true
				break
			}
		}
		if matched {
			continue
		}
		c := p[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
			return "", fmt.Errorf("%q uses the pattern letter %q, which sluice does not support; use yyyy, yy, MM, dd, HH, mm, ss and quoted literals", p, c)
		}
		b.WriteByte(c)
		i++
	}
	return b.String(), nil
}
