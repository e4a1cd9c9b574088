package interceptor

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/event"
)

func TestTimestamp(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		in    event.Event
		want  map[string]string
	}{
		{"nil headers", nil, ev("a"), hdrs("timestamp", "NOW")},
		{"overwrites by default", nil, ev("a", "timestamp", "1"), hdrs("timestamp", "NOW")},
		{"preserveExisting keeps", map[string]string{"preserveExisting": "true"}, ev("a", "timestamp", "1"), hdrs("timestamp", "1")},
		{"preserveExisting sets when absent", map[string]string{"preserveExisting": "true"}, ev("a", "x", "y"), hdrs("x", "y", "timestamp", "NOW")},
		{"headerName", map[string]string{"headerName": "ts"}, ev("a", "timestamp", "1"), hdrs("timestamp", "1", "ts", "NOW")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now().UnixMilli()
			ic := build(t, NewTimestamp, tt.props)
			out := ic.Intercept([]event.Event{tt.in})
			after := time.Now().UnixMilli()
			if len(out) != 1 {
				t.Fatalf("got %d events, want 1", len(out))
			}
			for k, v := range tt.want {
				got, ok := out[0].Headers.Get(k)
				if !ok {
					t.Errorf("header %s missing", k)
					continue
				}
				if v == "NOW" {
					ms, err := strconv.ParseInt(got, 10, 64)
					if err != nil || ms < before || ms > after {
						t.Errorf("header %s = %q, want epoch millis in [%d, %d]", k, got, before, after)
					}
				} else if got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if len(out[0].Headers) != len(tt.want) {
				t.Errorf("headers %v, want keys of %v", out[0].Headers, tt.want)
			}
		})
	}
}

func TestTimestampBadBool(t *testing.T) {
	got := buildErr(t, NewTimestamp, map[string]string{"preserveExisting": "yes"})
	wantContains(t, got, prefix+"preserveExisting", `"yes" is not a boolean`)
}

func TestStatic(t *testing.T) {
	tests := []struct {
		name  string
		props map[string]string
		in    event.Event
		want  map[string]string
	}{
		{"defaults on nil headers", nil, ev("a"), hdrs("key", "value")},
		{"preserves by default", map[string]string{"key": "dc", "value": "eu"}, ev("a", "dc", "us"), hdrs("dc", "us")},
		{"sets when absent", map[string]string{"key": "dc", "value": "eu"}, ev("a", "x", "1"), hdrs("x", "1", "dc", "eu")},
		{"overwrites without preserve", map[string]string{"key": "dc", "value": "eu", "preserveExisting": "false"}, ev("a", "dc", "us"), hdrs("dc", "eu")},
		{"empty value", map[string]string{"key": "dc", "value": ""}, ev("a"), hdrs("dc", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := build(t, NewStatic, tt.props).Intercept([]event.Event{tt.in})
			if len(out) != 1 || !sameHeaders(out[0].Headers, tt.want) {
				t.Fatalf("got %v, want %v", out, tt.want)
			}
		})
	}
}

func TestHost(t *testing.T) {
	ip := build(t, NewHost, nil).Intercept([]event.Event{ev("a")})
	if net.ParseIP(ip[0].Headers.Value("host")) == nil {
		t.Fatalf("host header %q is not an IP address (useIP defaults to true)", ip[0].Headers.Value("host"))
	}
	name := build(t, NewHost, map[string]string{"useIP": "false", "hostHeader": "h"}).Intercept([]event.Event{ev("a")})
	if v := name[0].Headers.Value("h"); v == "" || net.ParseIP(v) != nil {
		t.Fatalf("h header %q, want a host name", v)
	}
	kept := build(t, NewHost, map[string]string{"preserveExisting": "true"}).Intercept([]event.Event{ev("a", "host", "orig"), ev("b")})
	if kept[0].Headers.Value("host") != "orig" || kept[1].Headers.Value("host") == "" {
		t.Fatalf("preserveExisting: got %v", kept)
	}
	over := build(t, NewHost, nil).Intercept([]event.Event{ev("a", "host", "orig")})
	if over[0].Headers.Value("host") == "orig" {
		t.Fatal("host overwritten expected without preserveExisting")
	}
}

func TestHostUnresolvable(t *testing.T) {
	old := resolveHost
	resolveHost = func(context.Context, bool) (string, error) { return "", errors.New("no such host") }
	defer func() { resolveHost = old }()
	out := build(t, NewHost, nil).Intercept([]event.Event{ev("a")})
	if out[0].Headers != nil {
		t.Fatalf("got headers %v, want none when the host cannot be resolved (as Flume)", out[0].Headers)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestUUID(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		events := make([]event.Event, 200) // more than one random chunk
		events[7] = ev("", "id", "keep")
		build(t, NewUUID, nil).Intercept(events)
		seen := map[string]bool{}
		for i, e := range events {
			id := e.Headers.Value("id")
			if i == 7 {
				if id != "keep" {
					t.Errorf("preserveExisting (default true) overwrote id: %q", id)
				}
				continue
			}
			if !uuidRE.MatchString(id) {
				t.Fatalf("event %d id %q is not a v4 UUID", i, id)
			}
			if seen[id] {
				t.Fatalf("duplicate id %q", id)
			}
			seen[id] = true
		}
	})
	t.Run("prefix header no preserve", func(t *testing.T) {
		out := build(t, NewUUID, map[string]string{"headerName": "uid", "prefix": "node1-", "preserveExisting": "false"}).
			Intercept([]event.Event{ev("", "uid", "old")})
		id := out[0].Headers.Value("uid")
		if len(id) != len("node1-")+36 || id[:6] != "node1-" || !uuidRE.MatchString(id[6:]) {
			t.Fatalf("uid = %q, want node1-<uuid>", id)
		}
	})
}

func TestRemoveHeader(t *testing.T) {
	in := func() event.Event {
		return ev("b", "a", "1", "b", "2", "c", "3", "x-trace", "4", "x-span", "5", "xx", "6")
	}
	tests := []struct {
		name  string
		props map[string]string
		want  map[string]string
	}{
		{"nothing configured", nil, hdrs("a", "1", "b", "2", "c", "3", "x-trace", "4", "x-span", "5", "xx", "6")},
		{"withName", map[string]string{"withName": "b"}, hdrs("a", "1", "c", "3", "x-trace", "4", "x-span", "5", "xx", "6")},
		{"fromList default separator", map[string]string{"fromList": "a ,  c,missing"}, hdrs("b", "2", "x-trace", "4", "x-span", "5", "xx", "6")},
		{"fromList custom separator", map[string]string{"fromList": "a|c", "fromListSeparator": `\|`}, hdrs("b", "2", "x-trace", "4", "x-span", "5", "xx", "6")},
		{"matching is a full match", map[string]string{"matching": "x-.*"}, hdrs("a", "1", "b", "2", "c", "3", "xx", "6")},
		{"matching not partial", map[string]string{"matching": "x"}, hdrs("a", "1", "b", "2", "c", "3", "x-trace", "4", "x-span", "5", "xx", "6")},
		{"all together", map[string]string{"withName": "a", "fromList": "b", "matching": "x.*"}, hdrs("c", "3")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := build(t, NewRemoveHeader, tt.props).Intercept([]event.Event{in(), ev("nil headers")})
			if !sameHeaders(out[0].Headers, tt.want) {
				t.Fatalf("got %v, want %v", out[0].Headers, tt.want)
			}
			if out[1].Headers != nil {
				t.Fatalf("nil header map became %v", out[1].Headers)
			}
		})
	}
}

func TestRemoveHeaderBadConfig(t *testing.T) {
	got := buildErr(t, NewRemoveHeader, map[string]string{"matching": "x(?=y)"})
	wantContains(t, got, prefix+"matching", "lookahead", "RE2")
	got = buildErr(t, NewRemoveHeader, map[string]string{"fromList": "a", "fromListSeparator": "[,"})
	wantContains(t, got, prefix+"fromListSeparator", "is not a valid regular expression", "missing closing ]")
}
