package config

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestLoadSources: a later source overrides a key of an earlier one without
// a warning (that is what several -f are for), a key set twice in one
// source is still a warning, and each problem names the source that set
// the key.
func TestLoadSources(t *testing.T) {
	base := Source{Name: "base.properties", Data: []byte("a1.sources = r1\na1.channels = c1\na1.sinks = k1\n" +
		"a1.sources.r1.type = seq\na1.sources.r1.channels = c1\na1.sources.r1.batchSize = 10\n" +
		"a1.channels.c1.type = memory\na1.channels.c1.capacity = 100\n" +
		"a1.sinks.k1.type = null\na1.sinks.k1.channel = c1\n")}
	site := Source{Name: "http://conf.example/site.properties", Data: []byte("# site overrides\n" +
		"a1.channels.c1.capacity = 5000\na1.channels.c1.capacity = 6000\n" +
		"a1.sources.r1.batchSize = lots\n")}
	a, err := LoadSources([]Source{base, site}, "a1", Lookup{})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Channels[0].Props.Int("capacity", 0); got != 6000 {
		t.Errorf("capacity %d, want the later source's 6000", got)
	}
	if a.File != "base.properties" || strings.Join(a.Files, " ") != "base.properties http://conf.example/site.properties" {
		t.Errorf("files %q %q", a.File, a.Files)
	}
	r1 := a.Sources[0].Props
	r1.Int("batchSize", 0)
	// Errors first, then warnings.
	want := `http://conf.example/site.properties:4: a1.sources.r1.batchSize: "lots" is not a whole number` + "\n" +
		"http://conf.example/site.properties:2: a1.channels.c1.capacity: ignored: set again on line 3, and the later value wins, as in Flume"
	if got := a.Problems.Error(); got != want {
		t.Errorf("problems:\n%s\nwant:\n%s", got, want)
	}
	// A missing required key is reported at the file of the component's type.
	r1.Required("bind")
	if ps := a.Problems.Sorted(); ps[0].String() != "base.properties:4: a1.sources.r1.bind: missing required property; set a1.sources.r1.bind" {
		t.Errorf("first problem %q", ps[0])
	}
}

func TestFetcherFiles(t *testing.T) {
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.properties"), filepath.Join(dir, "two.properties")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(one, "a=1\n")
	write(two, "b=2\n")
	f := &Fetcher{Locations: []string{one, "file://" + two}}
	srcs, changed, err := f.Fetch(context.Background())
	if err != nil || !changed || len(srcs) != 2 || srcs[0].Name != one || string(srcs[1].Data) != "b=2\n" {
		t.Fatalf("first fetch %v %v %v", srcs, changed, err)
	}
	if _, changed, err = f.Fetch(context.Background()); err != nil || changed {
		t.Fatalf("unchanged files reported changed=%v, %v", changed, err)
	}
	write(two, "b=3\n")
	if _, changed, err = f.Fetch(context.Background()); err != nil || !changed {
		t.Fatalf("changed file not seen: %v, %v", changed, err)
	}
	os.Remove(one)
	if _, _, err = f.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "one.properties") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestFetcherHTTP: basic authentication, conditional requests answered 304
// keep the last content, and failures name the URI without credentials.
func TestFetcherHTTP(t *testing.T) {
	var mu sync.Mutex
	body, etag := "a1.x = 1\n", `"v1"`
	var sawConditional bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if u, p, ok := r.BasicAuth(); !ok || u != "flume" || p != "pa55" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Header.Get("If-None-Match") == etag {
			sawConditional = true
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	f := &Fetcher{Locations: []string{srv.URL + "/a1.properties"}, User: "flume", Password: "pa55"}
	srcs, changed, err := f.Fetch(context.Background())
	if err != nil || !changed || string(srcs[0].Data) != body {
		t.Fatalf("first fetch %v %v %v", srcs, changed, err)
	}
	srcs, changed, err = f.Fetch(context.Background())
	if err != nil || changed || string(srcs[0].Data) != body || !sawConditional {
		t.Fatalf("second fetch: changed %v, %v, conditional %v", changed, err, sawConditional)
	}
	mu.Lock()
	body, etag = "a1.x = 2\n", `"v2"`
	mu.Unlock()
	if srcs, changed, err = f.Fetch(context.Background()); err != nil || !changed || string(srcs[0].Data) != body {
		t.Fatalf("after a change: %v %v %v", srcs, changed, err)
	}

	// Credentials in the URI work and are never printed.
	u := strings.Replace(srv.URL, "http://", "http://flume:wrong-pa55@", 1) + "/a1.properties"
	_, _, err = (&Fetcher{Locations: []string{u}}).Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized; check --conf-user and --conf-password") || strings.Contains(err.Error(), "wrong-pa55") {
		t.Fatalf("wrong password: %v", err)
	}
	if n := Name(u); strings.Contains(n, "pa55") || n != srv.URL+"/a1.properties" {
		t.Errorf("Name(%q) = %q", u, n)
	}
	srv.Close()
	_, _, err = (&Fetcher{Locations: []string{u}}).Fetch(context.Background())
	if err == nil || strings.Contains(err.Error(), "wrong-pa55") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("server down: %v", err)
	}
}
