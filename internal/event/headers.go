package event

import (
	"iter"
	"slices"
	"strings"
)

// Header is one header of an event.
type Header struct{ Key, Value string }

// Headers are an event's headers: at most one value per key, in the order
// the keys were first set.
//
// They are a slice, not a map, because almost every event carries a few
// headers (none to a dozen): a map is two allocations and ~300 bytes
// before its first entry, and hashes every key it sees, where a slice of
// pairs is found by a short scan and can be cut, for a whole batch, from
// one allocation. A source that does so gives each event a region of its
// own with its capacity capped at its length (s[i:j:j]), so a Set that
// grows one event's headers moves them rather than writing into the next
// event's: an event's headers belong to that event alone, as a map did.
//
// The zero value is empty and ready to use.
type Headers []Header

// smallHeaders is up to how many headers Dedupe compares pairwise rather
// than through a map: above an OTLP SDK record's 18, so that the file
// channel's decode of such an event makes no map.
const smallHeaders = 32

// Get returns the value of header k and whether it is present.
func (h Headers) Get(k string) (string, bool) {
	for i := range h {
		if h[i].Key == k {
			return h[i].Value, true
		}
	}
	return "", false
}

// Value returns the value of header k, or "" when absent.
func (h Headers) Value(k string) string {
	v, _ := h.Get(k)
	return v
}

// Has reports whether header k is present.
func (h Headers) Has(k string) bool {
	_, ok := h.Get(k)
	return ok
}

// Len is the number of headers.
func (h Headers) Len() int { return len(h) }

// Set sets header k to v: in place when present, appended otherwise.
func (h *Headers) Set(k, v string) {
	s := *h
	for i := range s {
		if s[i].Key == k {
			s[i].Value = v
			return
		}
	}
	if s == nil {
		s = make(Headers, 0, 4)
	}
	*h = append(s, Header{k, v})
}

// Delete removes header k, keeping the order of the others.
func (h *Headers) Delete(k string) {
	s := *h
	for i := range s {
		if s[i].Key == k {
			*h = slices.Delete(s, i, i+1)
			return
		}
	}
}

// All yields every header, in order.
func (h Headers) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, kv := range h {
			if !yield(kv.Key, kv.Value) {
				return
			}
		}
	}
}

// Clone returns a copy whose changes do not show in h.
func (h Headers) Clone() Headers {
	if h == nil {
		return nil
	}
	return slices.Clone(h)
}

// Map returns the headers as a map, nil when there are none. Code on a
// hot path reads Headers directly; Map is for APIs that take a map.
func (h Headers) Map() map[string]string {
	if len(h) == 0 {
		return nil
	}
	m := make(map[string]string, len(h))
	for _, kv := range h {
		m[kv.Key] = kv.Value
	}
	return m
}

// HeadersOf returns m's entries as Headers, sorted by key so that the same
// map always gives the same order; nil when m is empty.
func HeadersOf(m map[string]string) Headers {
	if len(m) == 0 {
		return nil
	}
	h := make(Headers, 0, len(m))
	for k, v := range m {
		h = append(h, Header{k, v})
	}
	h.Sort()
	return h
}

// Sort orders the headers by key.
func (h Headers) Sort() {
	slices.SortFunc(h, func(a, b Header) int { return strings.Compare(a.Key, b.Key) })
}

// AppendSorted appends h to dst, the part it appended ordered by key, and
// returns the result: what a writer that prints headers by name walks,
// pair by pair. Sorting the pairs, not the keys to look each up again, keeps
// an event with many headers (a hostile one may carry tens of thousands)
// at n log n. dst is a buffer the caller keeps for the next event.
func (h Headers) AppendSorted(dst Headers) Headers {
	n := len(dst)
	dst = append(dst, h...)
	dst[n:].Sort()
	return dst
}

// Equal reports whether h and o hold the same headers, in any order.
func (h Headers) Equal(o Headers) bool {
	if len(h) != len(o) {
		return false
	}
	for _, kv := range h {
		if v, ok := o.Get(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	// Both ways: headers appended without Set may repeat a key.
	for _, kv := range o {
		if v, ok := h.Get(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// Dedupe makes the keys of headers appended without Set (by a decoder of
// bytes from the wire, which may repeat a key) unique: the last value of a
// key wins, at the place of its first occurrence, as a map decoded from the
// same bytes would keep it. It costs a map only past 32 headers,
// so hostile input with many headers stays linear.
func (h *Headers) Dedupe() {
	s := *h
	if len(s) < 2 {
		return
	}
	if len(s) <= smallHeaders {
		out := s[:0]
	next:
		for _, kv := range s {
			for i := range out {
				if out[i].Key == kv.Key {
					out[i].Value = kv.Value
					continue next
				}
			}
			out = append(out, kv)
		}
		clear(s[len(out):])
		*h = out
		return
	}
	at := make(map[string]int, len(s))
	out := s[:0]
	for _, kv := range s {
		if i, ok := at[kv.Key]; ok {
			out[i].Value = kv.Value
			continue
		}
		at[kv.Key] = len(out)
		out = append(out, kv)
	}
	clear(s[len(out):])
	*h = out
}

// HeaderArena hands out the headers of many events from few allocations:
// a source that gives each event of a batch a few headers makes one
// allocation for a whole batch instead of one per event. Each Make is a
// region of its own, capped (see Headers), and an arena never hands out
// the same memory twice, so what it gave stays the events' alone. The zero
// value is ready to use; it is not safe for concurrent use.
type HeaderArena struct{ free Headers }

// arenaChunk is how many headers an arena allocates at a time.
const arenaChunk = 512

// Make returns empty Headers with room for n.
func (a *HeaderArena) Make(n int) Headers {
	if cap(a.free)-len(a.free) < n {
		a.free = make(Headers, 0, max(n, arenaChunk))
	}
	i := len(a.free)
	a.free = a.free[:i+n]
	return a.free[i : i : i+n]
}
