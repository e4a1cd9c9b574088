package interceptor

import (
	"bytes"
	"regexp"
	"testing"
)

// javaExpandRef expands repl for one match the way Java's
// Matcher.appendReplacement does, read directly from the replacement
// string each time: the oracle for javaReplacement's translation.
func javaExpandRef(re *regexp.Regexp, repl string, src []byte, m []int) []byte {
	var out []byte
	for i := 0; i < len(repl); {
		switch c := repl[i]; c {
		case '\\':
			out = append(out, repl[i+1])
			i += 2
		case '$':
			i++
			n := 0
			if repl[i] == '{' {
				j := bytes.IndexByte([]byte(repl[i:]), '}') + i
				n = re.SubexpIndex(repl[i+1 : j])
				i = j + 1
			} else {
				n = int(repl[i] - '0')
				for i++; i < len(repl) && repl[i] >= '0' && repl[i] <= '9' && n*10+int(repl[i]-'0') <= re.NumSubexp(); i++ {
					n = n*10 + int(repl[i]-'0')
				}
			}
			if m[2*n] >= 0 {
				out = append(out, src[m[2*n]:m[2*n+1]]...)
			}
		default:
			out = append(out, c)
			i++
		}
	}
	return out
}

func FuzzJavaReplacement(f *testing.F) {
	f.Add(`$1 at ${host}`, []byte("me@there you@here"))
	f.Add(`\$$2$10\\`, []byte("a@b"))
	f.Add(`$$`, []byte("x@y"))
	f.Add(`${1}`, []byte("x@y"))
	f.Add(`plain`, []byte("\xff@\xfe"))
	re := regexp.MustCompile(`(\w+)@(?<host>\w+)(x)?(x)?(x)?(x)?(x)?(x)?(x)?(y)?`)
	f.Fuzz(func(t *testing.T, repl string, body []byte) {
		tmpl, literal, err := javaReplacement(re, repl)
		if err != nil {
			return
		}
		var got []byte
		if literal {
			got = re.ReplaceAllLiteral(body, tmpl)
		} else {
			got = re.ReplaceAll(body, tmpl)
		}
		var want []byte
		last := 0
		for _, m := range re.FindAllSubmatchIndex(body, -1) {
			want = append(want, body[last:m[0]]...)
			want = append(want, javaExpandRef(re, repl, body, m)...)
			last = m[1]
		}
		want = append(want, body[last:]...)
		if !bytes.Equal(got, want) {
			t.Fatalf("repl %q on %q: got %q, want %q (template %q)", repl, body, got, want, tmpl)
		}
		// ISO-8859-1 holds every byte: decoding and encoding is the identity.
		if rt := latin1Charset.encode(latin1Charset.decode(body)); !bytes.Equal(rt, body) {
			t.Fatalf("latin1 round trip of %q gave %q", body, rt)
		}
	})
}
