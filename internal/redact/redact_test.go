package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	r := New("s3cret-token", "ab", "token")
	f := func(in, want string) {
		t.Helper()
		if got := r.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
	f("http://h/ingest?key=s3cret-token", "http://h/ingest?key=<secret>")
	f("no secret here: ab", "no secret here: ab") // shorter than MinLen: left alone
	f("a token and s3cret-token", "a <secret> and <secret>")
	f("", "")

	var nilR *Redactor
	if nilR.String("token") != "token" || (&Redactor{}).String("token") != "token" {
		t.Error("a nil or zero Redactor changed a text")
	}
	r.Set(nil)
	if r.String("s3cret-token") != "s3cret-token" {
		t.Error("Set(nil) kept the old secrets")
	}
}

// TestEscapedForms: a secret is masked in the forms messages give it: %q,
// a URL's query or path, a JSON string.
func TestEscapedForms(t *testing.T) {
	secret := `p&ss/w"rd+1=`
	r := New(secret)
	for _, in := range []string{
		secret,
		fmt.Sprintf("%q", "x "+secret),
		"http://h/?t=" + url.QueryEscape(secret),
		"http://h/" + url.PathEscape(secret),
		string(must(json.Marshal("x " + secret))),
	} {
		if got := r.String(in); strings.Contains(got, "w\\\"rd") || strings.Contains(got, "rd+1") ||
			strings.Contains(got, "rd%2B1") || !strings.Contains(got, Mask) {
			t.Errorf("String(%s) = %s", in, got)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestLongestFirst(t *testing.T) {
	r := New("secret", "my-secret-value")
	if got := r.String("is my-secret-value"); got != "is <secret>" {
		t.Errorf("%q: the longer secret was not masked whole", got)
	}
}

func TestBytesAndError(t *testing.T) {
	r := New("hunter22")
	b := []byte("no secret")
	if got := r.Bytes(b); &got[0] != &b[0] {
		t.Error("Bytes copied a text without secrets")
	}
	if got := r.Bytes([]byte("pw hunter22")); string(got) != "pw <secret>" {
		t.Errorf("Bytes = %q", got)
	}
	cause := fmt.Errorf("open /x/hunter22: %w", fs.ErrNotExist)
	err := r.Error(cause)
	if err.Error() != "open /x/<secret>: file does not exist" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Error = %v (Is ErrNotExist: %v)", err, errors.Is(err, fs.ErrNotExist))
	}
	if r.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
	if plain := errors.New("plain"); !errors.Is(r.Error(plain), plain) {
		t.Error("an error without secrets was wrapped")
	}
}

func TestURLPasswords(t *testing.T) {
	f := func(in string, want ...string) {
		t.Helper()
		if got := URLPasswords(in); !slices.Equal(got, want) {
			t.Errorf("URLPasswords(%q) = %q, want %q", in, got, want)
		}
	}
	f("http://bob:pa55@host:80/x?y=1", "pa55")
	f("http://bob@host/x")
	f("http://host/x?u=a:b@c")
	f("jdbc:mysql://u:p%40ss@db/x", "p%40ss", "p@ss")
	f("first https://a:one@h and ftp://b:two@h/", "one", "two")
	f("bob:pa55@host") // not a URL
	f("")
}

func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	r := New("tok-123")
	log := slog.New(r.Handler(slog.NewTextHandler(&buf, nil))).With("bound", "tok-123")
	log.Info("msg tok-123", "err", errors.New("bad tok-123"), slog.Group("g", "k", "tok-123"), "n", 5)
	out := buf.String()
	if strings.Contains(out, "tok-123") || strings.Count(out, Mask) != 4 || !strings.Contains(out, "n=5") {
		t.Errorf("log line: %s", out)
	}
	// Secrets read later (a reload) apply to records logged after.
	buf.Reset()
	r.Set([]string{"new-secret"})
	log.Info("x", "v", "new-secret")
	if strings.Contains(buf.String(), "new-secret") {
		t.Errorf("log line: %s", buf.String())
	}
}
