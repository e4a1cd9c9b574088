package config

import (
	"sort"
	"strconv"
	"strings"
)

// Value is one property value with the file and line it was read from.
type Value struct {
	Text string
	Line int
	File string // "" means the File of the Props that holds it
	// Secret is set when the value was read through a config filter: it
	// is never quoted in a problem, and fingerprints hold only its hash.
	Secret bool
}

// Props is the set of properties of one component (or of one part of it,
// such as a selector), with keys relative to Prefix. Components read their
// settings through the typed getters, which record a Problem for a bad value
// and remember which keys were read, so that Unused can report every key no
// component asked for as an unknown property.
//
// A Props is not safe for concurrent use; components read it once, in their
// constructor.
type Props struct {
	File   string
	Prefix string // full key prefix, such as "a1.sources.r1."
	Line   int    // line of the component's type key, for problems without a key of their own

	vals  map[string]Value // relative to the root prefix
	root  string           // Prefix of the root Props; vals keys are relative to it
	used  map[string]bool
	asked map[string]bool // every key a getter asked for, set or not: the known names, for suggestions
	probs *Problems
}

// NewProps returns the properties vals (keys relative to prefix) of one
// component defined at line of file; problems go to probs.
func NewProps(file, prefix string, line int, vals map[string]Value, probs *Problems) *Props {
	if vals == nil {
		vals = map[string]Value{}
	}
	if probs == nil {
		probs = &Problems{}
	}
	return &Props{File: file, Prefix: prefix, Line: line, vals: vals, root: prefix, used: map[string]bool{}, asked: map[string]bool{}, probs: probs}
}

// FromMap is a convenience for tests and for components built in code: the
// properties m of a component named prefix, with no file.
func FromMap(prefix string, m map[string]string) *Props {
	vals := make(map[string]Value, len(m))
	for k, v := range m {
		vals[k] = Value{Text: v}
	}
	return NewProps("<map>", prefix, 0, vals, nil)
}

// Problems returns where p records problems.
func (p *Props) Problems() *Problems { return p.probs }

// Err returns the problems recorded so far (for every Props sharing them),
// warnings included, or nil. Component tests use it after Unused to check
// that every key was read; whether a configuration runs is decided by its
// errors alone (Problems.Err).
func (p *Props) Err() error {
	if p.probs.Count(Error)+p.probs.Count(Warning) == 0 {
		return nil
	}
	return p.probs
}

// Sub returns the view of the keys under p's key prefix sub (such as
// "selector."), sharing p's problems and used-key record.
func (p *Props) Sub(sub string) *Props {
	q := *p
	q.Prefix = p.Prefix + sub
	return &q
}

func (p *Props) rel(key string) string { return p.Prefix[len(p.root):] + key }

// Full returns the full property name of key, as a user wrote it.
func (p *Props) Full(key string) string { return p.Prefix + key }

// Has reports whether key is set, and marks it read.
func (p *Props) Has(key string) bool {
	_, ok := p.lookup(key)
	return ok
}

func (p *Props) lookup(key string) (Value, bool) {
	r := p.rel(key)
	p.asked[r] = true
	v, ok := p.vals[r]
	if ok {
		p.used[r] = true
	}
	return v, ok
}

// LineOf returns the line key was read from, or the component's line.
func (p *Props) LineOf(key string) int {
	if v, ok := p.vals[p.rel(key)]; ok && v.Line > 0 {
		return v.Line
	}
	return p.Line
}

// FileOf returns the file key was read from (with several config files,
// the one that set it last), or the component's file.
func (p *Props) FileOf(key string) string {
	if v, ok := p.vals[p.rel(key)]; ok && v.File != "" {
		return v.File
	}
	return p.File
}

// Errorf records a problem about key.
func (p *Props) Errorf(key, format string, args ...any) {
	p.probs.Add(p.FileOf(key), p.LineOf(key), p.Full(key), format, args...)
}

// Warnf records a warning about key: the configuration still runs.
func (p *Props) Warnf(key, format string, args ...any) {
	p.probs.Warn(p.FileOf(key), p.LineOf(key), p.Full(key), format, args...)
}

// Notef records a note about key (INFO at start, listed by validate): the
// configuration runs as written, and this is worth knowing.
func (p *Props) Notef(key, format string, args ...any) {
	p.probs.Note(p.FileOf(key), p.LineOf(key), p.Full(key), format, args...)
}

// Ignored marks key as read and, when it is set, records a note that
// sluice deliberately does without it, for reason (a Flume setting with no
// meaning here, such as JVM or Netty tuning).
func (p *Props) Ignored(key, reason string) {
	if _, ok := p.lookup(key); ok {
		p.probs.Note(p.FileOf(key), p.LineOf(key), p.Full(key), "ignored (not needed by sluice): %s", reason)
	}
}

// IsSecret reports whether key's value was read through a config filter.
func (p *Props) IsSecret(key string) bool { return p.vals[p.rel(key)].Secret }

// show is how a value appears in a problem: quoted, unless it is a secret.
func show(v Value) string {
	if v.Secret {
		return "the value read through a config filter"
	}
	return strconv.Quote(v.Text)
}

// Keys returns the keys below prefix (relative to p, prefix included),
// sorted, without marking them read.
func (p *Props) Keys(prefix string) []string {
	base := p.rel("")
	var out []string
	for k := range p.vals {
		if strings.HasPrefix(k, base+prefix) {
			out = append(out, k[len(base):])
		}
	}
	sort.Strings(out)
	return out
}

// Set gives key the value text, on the line of the key from (or of the
// component), replacing what the file said. It is for a component that
// translates its keys into another's (Flume's spillable memory channel runs
// as a file or memory channel): the other reads key as if the user had
// written it.
func (p *Props) Set(key, text, from string) {
	line := p.Line
	if l := p.LineOf(from); l > 0 {
		line = l
	}
	p.vals[p.rel(key)] = Value{Text: text, Line: line, File: p.FileOf(from)}
}

// MarkUsed marks key as read without reading it, for keys another layer
// handles.
func (p *Props) MarkUsed(key string) { p.used[p.rel(key)] = true }

// String returns key's value, or def when it is not set.
func (p *Props) String(key, def string) string {
	if v, ok := p.lookup(key); ok {
		return v.Text
	}
	return def
}

// Required returns key's value and records a problem when it is missing or empty.
func (p *Props) Required(key string) string {
	v, ok := p.lookup(key)
	if !ok || strings.TrimSpace(v.Text) == "" {
		p.probs.Add(p.FileOf(key), p.LineOf(key), p.Full(key), "missing required property; set %s", p.Full(key))
		return ""
	}
	return strings.TrimSpace(v.Text)
}

// Int returns key's value as an int, or def when unset.
func (p *Props) Int(key string, def int) int {
	return int(p.Int64(key, int64(def)))
}

// Int64 returns key's value as an int64, or def when unset.
func (p *Props) Int64(key string, def int64) int64 {
	v, ok := p.lookup(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v.Text), 10, 64)
	if err != nil {
		p.Errorf(key, "%s is not a whole number", show(v))
		return def
	}
	return n
}

// IntRange is Int with bounds: a value outside [lo, hi] is a problem.
func (p *Props) IntRange(key string, def, lo, hi int) int {
	n := p.Int(key, def)
	if n < lo || n > hi {
		p.Errorf(key, "%d is out of range; use a value from %d to %d", n, lo, hi)
		return def
	}
	return n
}

// Float returns key's value as a float64, or def when unset.
func (p *Props) Float(key string, def float64) float64 {
	v, ok := p.lookup(key)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v.Text), 64)
	if err != nil {
		p.Errorf(key, "%s is not a number", show(v))
		return def
	}
	return f
}

// Bool returns key's value as a bool, or def when unset. Flume reads
// booleans with Java's Boolean.parseBoolean, which takes anything but "true"
// as false; sluice accepts true and false in any case and reports the rest.
func (p *Props) Bool(key string, def bool) bool {
	v, ok := p.lookup(key)
	if !ok {
		return def
	}
	switch strings.ToLower(strings.TrimSpace(v.Text)) {
	case "true":
		return true
	case "false":
		return false
	}
	p.Errorf(key, "%s is not a boolean; use true or false", show(v))
	return def
}

// Enum returns key's value lowercased when it is one of allowed (compared
// case-insensitively), def when unset, and records a problem otherwise.
func (p *Props) Enum(key, def string, allowed ...string) string {
	v, ok := p.lookup(key)
	if !ok {
		return def
	}
	s := strings.ToLower(strings.TrimSpace(v.Text))
	for _, a := range allowed {
		if s == strings.ToLower(a) {
			return s
		}
	}
	p.Errorf(key, "%s is not one of %s", show(v), strings.Join(allowed, ", "))
	return def
}

// Fields returns key's value split on white space, as Flume splits its lists.
func (p *Props) Fields(key string) []string {
	v, ok := p.lookup(key)
	if !ok {
		return nil
	}
	return strings.Fields(v.Text)
}

// Split returns key's value split on sep with each part trimmed and empty
// parts dropped (for comma lists such as dataDirs).
func (p *Props) Split(key, sep string) []string {
	v, ok := p.lookup(key)
	if !ok {
		return nil
	}
	var out []string
	for _, s := range strings.Split(v.Text, sep) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Unused records a warning for every key below p that nothing read (an
// error when the key looks like a security setting: see securityKey): Flume
// ignores such keys, and real Flume configurations carry them (settings of
// other versions, misspellings copied from articles), so they must not stop
// the agent; but the user should learn that sluice does not read them. A
// suggestion is added when a key that was asked for is close in spelling,
// or is the same key under a different prefix (kafka.flumeBatchSize for
// flumeBatchSize). Call it on a component's root Props after its
// constructor ran.
func (p *Props) Unused() {
	base := p.rel("")
	var keys []string
	for k := range p.vals {
		if strings.HasPrefix(k, base) && !p.used[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	known := p.knownNames()
	for _, k := range keys {
		v := p.vals[k]
		file := v.File
		if file == "" {
			file = p.File
		}
		suggest := ""
		if s := closest(k, known); s != "" {
			suggest = "did you mean " + p.root + s + "?"
		}
		if securityKey(k) {
			// Running without a security setting the user wrote (a
			// misspelt ssl, a keystore key this component lacks) would
			// leave data less protected than configured: refuse.
			msg := "sluice does not read it, and running without a security setting could leave data less protected than configured; "
			if suggest != "" {
				msg += suggest + " Fix it or remove it"
			} else {
				msg += "remove it, or check docs/components.md for this component's settings"
			}
			p.probs.Add(file, v.Line, p.root+k, "%s", msg)
			continue
		}
		msg := "ignored: sluice does not read it"
		if suggest != "" {
			msg += "; " + suggest
		}
		p.probs.Warn(file, v.Line, p.root+k, "%s", msg)
	}
}

// securityWords mark a key as a security setting.
var securityWords = []string{"ssl", "tls", "keystore", "truststore", "password", "sasl", "jaas",
	"kerberos", "keytab", "principal", "encrypt", "cipher", "trust-all", "certificate"}

// securityKey reports whether an unread key looks like a security setting,
// which is refused rather than ignored.
func securityKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range securityWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// knownName is a key a getter asked for, and its lower case.
type knownName struct{ name, lower string }

// knownNames returns the keys the getters asked for, sorted, each with its
// lower case, for closest.
func (p *Props) knownNames() []knownName {
	out := make([]knownName, 0, len(p.asked))
	for u := range p.asked {
		out = append(out, knownName{u, strings.ToLower(u)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// closest returns the known key nearest to k in edit distance, if close,
// or else one that k ends with (or that ends with k) after a dot. Ties go
// to the first in sorted order. It is linear in the known keys for each k
// (a key whose length is too far off is not compared), so that a file of
// many unknown keys costs no more than reading them.
func closest(k string, known []knownName) string {
	best, bestD := "", 3
	lk := strings.ToLower(k)
	var rows editRows
	for _, u := range known {
		if abs(len(lk)-len(u.lower)) >= bestD {
			continue // the distance is at least the difference in length
		}
		if d := rows.distance(lk, u.lower, bestD); d < bestD {
			best, bestD = u.name, d
		}
	}
	if best != "" {
		return best
	}
	for _, u := range known {
		if strings.HasSuffix(lk, "."+u.lower) || strings.HasSuffix(u.lower, "."+lk) {
			return u.name
		}
	}
	return ""
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// editRows are the two rows of EditDistance's table, reused across calls.
type editRows struct{ prev, cur []int }

// distance is EditDistance(a, b) when it is below limit, else limit or
// more: it stops as soon as every entry of a row reaches limit.
func (r *editRows) distance(a, b string, limit int) int {
	if cap(r.prev) < len(b)+1 {
		r.prev, r.cur = make([]int, len(b)+1), make([]int, len(b)+1)
	}
	prev, cur := r.prev[:len(b)+1], r.cur[:len(b)+1]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// EditDistance is the Levenshtein distance between a and b (in bytes): the
// measure behind every "did you mean" in a config message.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
