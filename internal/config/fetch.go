package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Fetcher reads an agent's configuration sources, as Flume 1.10+ reads
// several -f files or --conf-uri URIs, and tells whether they changed since
// the last read, for polling.
//
// A location is a file path, or a URI: file:, http: or https:. HTTP
// requests carry basic authentication when User is set, and are
// conditional (If-None-Match, If-Modified-Since) after the first, so an
// unchanged configuration costs a 304. Any location that cannot be read
// fails the whole Fetch: a configuration is never built from some of its
// sources.
type Fetcher struct {
	Locations      []string
	User, Password string
	// Client makes the HTTP requests; nil means a client with a 30 s
	// timeout and the system's trusted roots.
	Client *http.Client
	// MaxBytes bounds one source (default 16 MiB).
	MaxBytes int64

	mu   sync.Mutex
	last map[string]*fetched // by location
}

type fetched struct {
	data         []byte
	etag, modHdr string
}

// IsRemote reports whether loc is an http or https URI.
func IsRemote(loc string) bool {
	l := strings.ToLower(loc)
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://")
}

// Name returns how loc is named in problems and logs: a URI without its
// user information, a path as given.
func Name(loc string) string {
	u, err := url.Parse(loc)
	if err != nil || u.Scheme == "" || len(u.Scheme) == 1 { // a path, or a Windows drive
		return loc
	}
	if u.User != nil {
		u.User = nil
	}
	return u.String()
}

// Fetch reads every location, in order. changed is true when any source's
// content differs from the last successful Fetch (always on the first).
func (f *Fetcher) Fetch(ctx context.Context) (srcs []Source, changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.Locations) == 0 {
		return nil, false, errors.New("no configuration file or URI given")
	}
	if f.last == nil {
		f.last = map[string]*fetched{}
	}
	next := map[string]*fetched{}
	for _, loc := range f.Locations {
		prev := f.last[loc]
		cur, err := f.read(ctx, loc, prev)
		if err != nil {
			return nil, false, err
		}
		if prev == nil || !bytes.Equal(prev.data, cur.data) {
			changed = true
		}
		next[loc] = cur
		srcs = append(srcs, Source{Name: Name(loc), Data: cur.data})
	}
	f.last = next
	return srcs, changed, nil
}

func (f *Fetcher) maxBytes() int64 {
	if f.MaxBytes > 0 {
		return f.MaxBytes
	}
	return 16 << 20
}

func (f *Fetcher) read(ctx context.Context, loc string, prev *fetched) (*fetched, error) {
	if !IsRemote(loc) {
		path := loc
		if u, err := url.Parse(loc); err == nil && strings.EqualFold(u.Scheme, "file") {
			path = u.Path
		}
		data, err := readLimited(path, f.maxBytes())
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		return &fetched{data: data}, nil
	}
	name := Name(loc)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	if req.URL.User != nil { // credentials in the URI are used, not logged
		pw, _ := req.URL.User.Password()
		req.SetBasicAuth(req.URL.User.Username(), pw)
		req.URL.User = nil
	}
	if f.User != "" {
		req.SetBasicAuth(f.User, f.Password)
	}
	if prev != nil {
		if prev.etag != "" {
			req.Header.Set("If-None-Match", prev.etag)
		}
		if prev.modHdr != "" {
			req.Header.Set("If-Modified-Since", prev.modHdr)
		}
	}
	client := f.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is named already, without credentials
		}
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && prev != nil:
		return prev, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("config %s: %s; check --conf-user and --conf-password", name, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("config %s: %s", name, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBytes()+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	if int64(len(data)) > f.maxBytes() {
		return nil, fmt.Errorf("config %s: larger than %d bytes", name, f.maxBytes())
	}
	return &fetched{data: data, etag: resp.Header.Get("ETag"), modHdr: resp.Header.Get("Last-Modified")}, nil
}

func readLimited(path string, max int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return data, nil
}
