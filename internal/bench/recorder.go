package bench

import (
	"math"
	"slices"
	"sync"
	"time"
)

// maxSeq bounds the sequence numbers a receiver tracks (its seen-set is a
// bitmap indexed by sequence, 32 MiB at this bound); a larger number is
// counted as malformed.
const maxSeq = 1 << 28

// maxSamples bounds the latency samples a receiver keeps (16 bytes each).
// Past it, every other sample is dropped and from then on only every second
// arrival is kept (then every fourth, ...), so the samples stay a uniform
// subset of the run and the percentiles stay unbiased.
const maxSamples = 1 << 22

// maxRecent bounds the latencies kept for the live progress line between
// two reads.
const maxRecent = 1 << 16

// sample is one delivered event: when it arrived and how long it took, both
// in nanoseconds.
type sample struct {
	at, lat int64
}

// recorder is what every receiver feeds: it tells first arrivals from
// duplicates and keeps latency samples. Safe for concurrent use.
type recorder struct {
	mu       sync.Mutex
	seen     []uint64 // bitmap by sequence number
	distinct int
	dups     int
	bad      int
	samples  []sample
	capacity int // most samples kept (maxSamples)
	stride   int // keep one arrival in stride
	skipped  int // arrivals since the last kept one
	first    int64
	last     int64
	recent   []int64 // latencies since the last takeRecent
	arrived  chan struct{}
}

func newRecorder() *recorder {
	return &recorder{capacity: maxSamples, stride: 1, arrived: make(chan struct{}, 1)}
}

// record notes the event with sequence seq sent at sent (Unix nanoseconds)
// that arrived at now.
func (r *recorder) record(seq uint64, sent, now int64) {
	r.mu.Lock()
	switch {
	case seq >= maxSeq:
		r.bad++
	case r.has(seq):
		r.dups++
	default:
		w := seq / 64
		if int(w) >= len(r.seen) {
			grown := make([]uint64, max(int(w)+1, 2*len(r.seen)))
			copy(grown, r.seen)
			r.seen = grown
		}
		r.seen[w] |= 1 << (seq % 64)
		r.distinct++
		lat := now - sent
		if r.first == 0 || now < r.first {
			r.first = now
		}
		r.last = max(r.last, now)
		if len(r.recent) < maxRecent {
			r.recent = append(r.recent, lat)
		}
		if r.skipped++; r.skipped >= r.stride {
			r.skipped = 0
			if len(r.samples) >= r.capacity {
				half := r.samples[:0]
				for i := 0; i < len(r.samples); i += 2 {
					half = append(half, r.samples[i])
				}
				r.samples = half
				r.stride *= 2
			}
			r.samples = append(r.samples, sample{at: now, lat: lat})
		}
	}
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
}

// malformed counts a line or event that carries no generated payload.
func (r *recorder) malformed() {
	r.mu.Lock()
	r.bad++
	r.mu.Unlock()
}

// has reports whether seq arrived. Caller holds mu.
func (r *recorder) has(seq uint64) bool {
	w := seq / 64
	return int(w) < len(r.seen) && r.seen[w]&(1<<(seq%64)) != 0
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.distinct
}

// takeRecent returns the latencies recorded since the last call, and the
// distinct and duplicate counts so far.
func (r *recorder) takeRecent(buf []int64) (lat []int64, distinct, dups int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	buf = append(buf[:0], r.recent...)
	r.recent = r.recent[:0]
	return buf, r.distinct, r.dups
}

// seqRange is a run of sequence numbers [from, from+n).
type seqRange struct{ from, n uint64 }

// report summarises the events numbered 0..sent-1, except those in unsent
// (numbers a sender took but never sent: it was interrupted).
func (r *recorder) report(sent int, unsent []seqRange) Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Sent: sent, Received: r.distinct, Duplicated: r.dups, Malformed: r.bad}
	skip := func(seq uint64) bool {
		for _, u := range unsent {
			if seq >= u.from && seq < u.from+u.n {
				return true
			}
		}
		return false
	}
	for i := uint64(0); i < uint64(sent); i++ {
		if !r.has(i) {
			if len(unsent) > 0 && skip(i) {
				rep.Sent--
				continue
			}
			rep.Lost++
		}
	}
	lat := make([]int64, len(r.samples))
	for i, s := range r.samples {
		lat[i] = s.lat
	}
	slices.Sort(lat)
	rep.fill(lat)
	if r.distinct > 0 {
		rep.FirstArrival = time.Unix(0, r.first)
		rep.LastArrival = time.Unix(0, r.last)
	}
	return rep
}

// series returns the samples in arrival order.
func (r *recorder) series() []sample {
	r.mu.Lock()
	out := slices.Clone(r.samples)
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b sample) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	return out
}

// fill sets the latency fields from sorted latencies in nanoseconds. A
// percentile is the smallest sample at or above that fraction of the
// samples (the nearest-rank method), so P99 of 100 samples is the 99th.
func (rep *Report) fill(lat []int64) {
	if len(lat) == 0 {
		return
	}
	at := func(q float64) time.Duration {
		rank := int(math.Ceil(q*float64(len(lat)) - 1e-9))
		return time.Duration(lat[min(len(lat)-1, max(0, rank-1))])
	}
	rep.P50, rep.P90, rep.P99, rep.P999 = at(0.50), at(0.90), at(0.99), at(0.999)
	rep.Max = time.Duration(lat[len(lat)-1])
	var sum float64
	for _, l := range lat {
		sum += float64(l)
	}
	rep.Mean = time.Duration(sum / float64(len(lat)))
}
