package metrics

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The latency histograms are log-linear: durations below 16 ns each have a
// bucket, and every power of two above is split into 16 equal buckets, so a
// bucket is at most 1/16 (6.25%) as wide as its lower bound. That resolves
// sub-millisecond percentiles (a P99 of 180 µs is reported as 180 µs, not
// somewhere between 160 and 320 µs as with factor-2 buckets) and costs one
// atomic add per observation for the bucket, one for the sum and a load for
// the maximum: cheaper than a prometheus.Histogram. Prometheus sees the
// same data as a classic histogram whose bounds are powers of two of
// nanoseconds (promBounds), each an exact edge of the fine buckets.
const (
	subBits    = 4
	subBuckets = 1 << subBits                         // buckets per power of two
	numBuckets = (64-subBits)*subBuckets + subBuckets // covers all of uint64
)

// bucketOf returns the bucket index of a duration of ns nanoseconds.
func bucketOf(ns uint64) int {
	if ns < 2*subBuckets {
		return int(ns)
	}
	shift := bits.Len64(ns) - subBits - 1
	return (shift+1)*subBuckets + int((ns>>uint(shift))&(subBuckets-1))
}

// bucketBounds returns the range [lo, hi) of durations in bucket i.
func bucketBounds(i int) (lo, hi float64) {
	if i < 2*subBuckets {
		return float64(i), float64(i + 1)
	}
	shift := i/subBuckets - 1
	m := float64(subBuckets + i%subBuckets)
	return math.Ldexp(m, shift), math.Ldexp(m+1, shift)
}

// hist is one latency histogram. Every field is updated atomically; readers
// see a slightly torn but never wrong state (count is the sum of the
// buckets, so percentiles are consistent with it).
type hist struct {
	stage     Stage
	component string

	sumLo, sumHi atomic.Uint64 // total nanoseconds as a 128-bit number
	max          atomic.Uint64 // nanoseconds
	buckets      [numBuckets]atomic.Uint64
}

func (h *hist) observe(ns uint64) {
	h.buckets[bucketOf(ns)].Add(1)
	if n := h.sumLo.Add(ns); n < ns { // wrapped: carry
		h.sumHi.Add(1)
	}
	for {
		m := h.max.Load()
		if ns <= m || h.max.CompareAndSwap(m, ns) {
			return
		}
	}
}

// read copies the buckets and returns the count and the sum in seconds.
func (h *hist) read(counts *[numBuckets]uint64) (count uint64, sumSeconds float64) {
	for i := range h.buckets {
		c := h.buckets[i].Load()
		counts[i] = c
		count += c
	}
	for {
		hi := h.sumHi.Load()
		lo := h.sumLo.Load()
		if h.sumHi.Load() == hi {
			return count, (float64(hi)*math.Exp2(64) + float64(lo)) / 1e9
		}
	}
}

// Histogram records latencies of one stage of one component. The zero value
// discards observations, so components built without a registry work. It is
// safe for concurrent use and does not allocate.
type Histogram struct {
	h *hist
}

// Since records the time from start (Unix nanoseconds, as in event.Event)
// to now (the same unit). A zero start is unknown and not recorded; a start
// after now (the wall clock stepped back) counts as zero.
func (h Histogram) Since(start, now int64) {
	if h.h == nil || start == 0 {
		return
	}
	d := now - start
	if d < 0 {
		d = 0
	}
	h.h.observe(uint64(d))
}

// Observe records d; a negative d counts as zero.
func (h Histogram) Observe(d time.Duration) {
	if h.h == nil {
		return
	}
	if d < 0 {
		d = 0
	}
	h.h.observe(uint64(d))
}

// StageLatency summarises one histogram. Percentiles are estimated by
// linear interpolation within a bucket (at most 6.25% wide) and never
// exceed Max, which is exact.
type StageLatency struct {
	Stage     Stage
	Component string
	Count     uint64
	Mean      time.Duration
	P50       time.Duration
	P90       time.Duration
	P99       time.Duration
	P999      time.Duration
	Max       time.Duration
}

func (h *hist) summary() StageLatency {
	var counts [numBuckets]uint64
	count, sum := h.read(&counts)
	s := StageLatency{Stage: h.stage, Component: h.component, Count: count}
	if count == 0 {
		return s
	}
	maxNs := h.max.Load()
	s.Max = time.Duration(maxNs)
	s.Mean = time.Duration(sum / float64(count) * 1e9)
	qs := []struct {
		q   float64
		out *time.Duration
	}{{0.5, &s.P50}, {0.9, &s.P90}, {0.99, &s.P99}, {0.999, &s.P999}}
	var cum uint64
	qi := 0
	for i := 0; i < numBuckets && qi < len(qs); i++ {
		c := counts[i]
		if c == 0 {
			continue
		}
		for qi < len(qs) {
			// rank is the 1-based position of the quantile's observation.
			rank := math.Ceil(qs[qi].q * float64(count))
			if rank > float64(cum+c) {
				break
			}
			lo, hi := bucketBounds(i)
			v := lo + (hi-lo)*(rank-float64(cum))/float64(c)
			if v > float64(maxNs) {
				v = float64(maxNs)
			}
			*qs[qi].out = time.Duration(v)
			qi++
		}
		cum += c
	}
	for ; qi < len(qs); qi++ { // buckets raced ahead of count
		*qs[qi].out = s.Max
	}
	return s
}

// promBounds are the upper bounds, in nanoseconds, of the classic histogram
// buckets Prometheus sees: powers of two from 1.024 µs to 68.7 s.
var promBounds = func() []uint64 {
	var b []uint64
	for k := 10; k <= 36; k++ {
		b = append(b, 1<<k)
	}
	return b
}()

// LatencyBuckets is the number of buckets of a latency histogram: the
// length of LatencyCounts.Counts and of what Quantile reads.
const LatencyBuckets = numBuckets

// LatencyCounts is a copy of one latency histogram's bucket counts. Two
// copies taken at different times subtract bucket by bucket to the counts of
// the observations in between, and counts of several histograms add up to
// those of their union: Quantile reads either.
type LatencyCounts struct {
	Stage     Stage
	Component string
	Counts    []uint64 // LatencyBuckets counts
}

// ReadLatencies copies the bucket counts of every latency histogram, ordered
// by stage and component, into dst, reusing its slices, and returns it.
func (r *Registry) ReadLatencies(dst []LatencyCounts) []LatencyCounts {
	hs := r.histograms()
	dst = dst[:0]
	for _, h := range hs {
		i := len(dst)
		if i < cap(dst) {
			dst = dst[:i+1]
		} else {
			dst = append(dst, LatencyCounts{})
		}
		c := &dst[i]
		c.Stage, c.Component = h.stage, h.component
		if cap(c.Counts) < numBuckets {
			c.Counts = make([]uint64, numBuckets)
		}
		c.Counts = c.Counts[:numBuckets]
		for b := range h.buckets {
			c.Counts[b] = h.buckets[b].Load()
		}
	}
	return dst
}

// Quantile estimates the q-quantile (0 < q <= 1) of a histogram's bucket
// counts (see LatencyCounts), interpolating linearly within the bucket, as
// the histograms' own summaries do; it is 0 when every count is 0.
func Quantile(counts []uint64, q float64) time.Duration {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := math.Ceil(q * float64(total))
	rank = max(rank, 1)
	var cum uint64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		if rank <= float64(cum+c) {
			lo, hi := bucketBounds(i)
			return time.Duration(lo + (hi-lo)*(rank-float64(cum))/float64(c))
		}
		cum += c
	}
	lo, _ := bucketBounds(len(counts) - 1)
	return time.Duration(lo)
}
