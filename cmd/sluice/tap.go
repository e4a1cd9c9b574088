package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/internal/status"
)

const tapUsage = `usage: sluice tap COMPONENT [options]

Prints events as they pass COMPONENT of a running agent: a source's output
(after its interceptors, once its channels committed them) or a channel's take
(what its sinks take). Events are sampled (--rate) and copied: a tap never
slows or changes delivery; samples a slow reader cannot keep up with are
dropped and counted on stderr. The agent serves taps only when started with
--allow-tap.

options:
  --rate N                 at most N events a second (default 10, at most 10000)
  --limit N                stop after N events (default: until interrupted)
  --kind source|channel    which component, when a source and a channel share the name
  --format text|json       text (default): time, component, headers and body on one line;
                           json: one JSON object per event (headers, body or body_base64)
` + clientUsage

func tapMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f clientFlags
	var component, kind, format = "", "", "text"
	rate, limit := "", 0
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "-h" || arg == "--help" || arg == "-help" {
			fmt.Fprint(stdout, tapUsage)
			return 0
		}
		n, err := f.flag(args, i)
		if err != nil {
			fmt.Fprintf(stderr, "sluice tap: %v\n\n%s", err, tapUsage)
			return exitUsage
		}
		if n > 0 {
			i += n - 1
			continue
		}
		name, val, hasVal := strings.Cut(arg, "=")
		next := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		switch name {
		case "--rate", "-rate":
			if rate, err = next(); err == nil {
				if r, perr := strconv.ParseFloat(rate, 64); perr != nil || !(r > 0 && r <= status.MaxTapRate) {
					err = fmt.Errorf("--rate %q: want events a second above 0, at most %d", rate, status.MaxTapRate)
				}
			}
		case "--limit", "-limit":
			var v string
			if v, err = next(); err == nil {
				if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
					err = fmt.Errorf("--limit %q: want a number of events", v)
				}
			}
		case "--kind", "-kind":
			if kind, err = next(); err == nil && kind != "source" && kind != "channel" {
				err = fmt.Errorf("--kind %q: use source or channel", kind)
			}
		case "--format", "-format":
			if format, err = next(); err == nil && format != "text" && format != "json" {
				err = fmt.Errorf("--format %q: use text or json", format)
			}
		default:
			if strings.HasPrefix(arg, "-") || component != "" {
				err = fmt.Errorf("unexpected argument %q", arg)
			}
			component = arg
		}
		if err != nil {
			fmt.Fprintf(stderr, "sluice tap: %v\n\n%s", err, tapUsage)
			return exitUsage
		}
	}
	if component == "" {
		fmt.Fprintf(stderr, "sluice tap: name the source or channel to tap\n\n%s", tapUsage)
		return exitUsage
	}
	c, err := f.client()
	if err != nil {
		fmt.Fprintf(stderr, "sluice tap: %v\n", err)
		return exitUsage
	}
	q := url.Values{"component": {component}}
	if kind != "" {
		q.Set("kind", kind)
	}
	if rate != "" {
		q.Set("rate", rate)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	resp, err := c.get(ctx, "api/tap?"+q.Encode())
	if err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		fmt.Fprintf(stderr, "sluice tap: %v\n", err)
		return exitFailed
	}
	defer resp.Body.Close()
	out := bufio.NewWriter(stdout)
	flushed := func() bool {
		if err := out.Flush(); err != nil {
			fmt.Fprintf(stderr, "sluice tap: write the events: %v\n", err)
			return false
		}
		return true
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	seen := 0
	for sc.Scan() {
		var l status.TapLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			fmt.Fprintf(stderr, "sluice tap: bad line from the agent: %v\n", err)
			return exitFailed
		}
		if l.Component == "" {
			if l.Dropped > 0 {
				if !flushed() {
					return exitFailed
				}
				fmt.Fprintf(stderr, "# %d sampled events dropped: this reader did not keep up\n", l.Dropped)
			}
			continue
		}
		if format == "json" {
			out.Write(sc.Bytes())
			out.WriteByte('\n')
		} else {
			writeTapText(out, l)
		}
		seen++
		if !flushed() { // show events as they come
			return exitFailed
		}
		if limit > 0 && seen >= limit {
			return exitOK
		}
	}
	if ctx.Err() != nil {
		return exitOK
	}
	err = sc.Err()
	if err == nil {
		err = errors.New("the agent closed the tap (stopping, or the tap point went away)")
	}
	fmt.Fprintf(stderr, "sluice tap: %v\n", err)
	return exitFailed
}

// writeTapText prints one event on one line: time, kind/component, headers
// sorted by name, then the body, quoted when it is not plain printable text.
func writeTapText(w *bufio.Writer, l status.TapLine) {
	w.WriteString(time.UnixMilli(l.Time).UTC().Format("2006-01-02T15:04:05.000Z"))
	w.WriteByte(' ')
	w.WriteString(l.Kind + "/" + l.Component)
	keys := make([]string, 0, len(l.Headers))
	for k := range l.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w.WriteString(" {")
	for i, k := range keys {
		if i > 0 {
			w.WriteString(", ")
		}
		w.WriteString(quoteIfNeeded(k) + "=" + quoteIfNeeded(l.Headers[k]))
	}
	w.WriteString("} ")
	switch {
	case l.Body != nil:
		w.WriteString(quoteIfNeeded(*l.Body))
	default:
		w.WriteString("base64:" + l.BodyBase64)
	}
	w.WriteByte('\n')
}

// quoteIfNeeded returns s as it is when it is printable text without
// separators that would make the line ambiguous, else Go-quoted.
func quoteIfNeeded(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == '"' || r == '{' || r == '}' || r == '=' || r == ',' {
			return strconv.Quote(s)
		}
	}
	return s
}
