package metrics

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestFormatFloat(t *testing.T) {
	// Expected strings are what Java 17's Double.toString prints for the
	// same doubles. Values are computed at run time (not as Go constants,
	// which are exact) so they round as Java's doubles do.
	one, three, seven, hundred := 1.0, 3.0, 7.0, 100.0
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{one / three * hundred, "33.33333333333333"},
		{2 * one / three * hundred, "66.66666666666666"},
		{one / seven * hundred, "14.285714285714285"},
		{100, "100.0"},
		{12.5, "12.5"},
		{1e-5, "1.0E-5"},
		{0.00099, "9.9E-4"},
		{1e-3, "0.001"},
		{0.002, "0.002"},
		{9999999, "9999999.0"},
		{1e7, "1.0E7"},
		{123456789, "1.23456789E8"},
		{1234567.125, "1234567.125"},
		{-12.5, "-12.5"},
		{-1e-5, "-1.0E-5"},
		{math.MaxFloat64, "1.7976931348623157E308"},
		{math.NaN(), "NaN"},
		{math.Inf(1), "Infinity"},
		{math.Inf(-1), "-Infinity"},
	}
	for _, tt := range tests {
		if got := FormatFloat(tt.in); got != tt.want {
			t.Errorf("FormatFloat(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestChannelFillPercentage(t *testing.T) {
	tests := []struct {
		size, capacity int64
		want           string
	}{
		{0, 100, "0.0"},
		{1, 3, "33.33333333333333"},
		{100, 100, "100.0"},
		{1, 8, "12.5"},
		// Expected strings from Java 17: ((double) size / capacity) * 100.
		{1, 10_000_000, "9.999999999999999E-6"},
		{1, 100_000_000, "1.0E-6"},
		{3, 7, "42.857142857142854"},
		{999_999, 1_000_000, "99.9999"},
		{7, 1_000_000, "7.0E-4"},
		{0, 0, "1.7976931348623157E308"}, // Kafka channel: capacity 0
	}
	for _, tt := range tests {
		c := NewChannelCounters("c1", "memory")
		c.SetSize(func() int64 { return tt.size }, func() int64 { return tt.capacity })
		got := map[string]string{}
		c.Each(func(n, v string) { got[n] = v })
		if got["ChannelFillPercentage"] != tt.want {
			t.Errorf("size %d capacity %d: ChannelFillPercentage = %q, want %q", tt.size, tt.capacity, got["ChannelFillPercentage"], tt.want)
		}
	}
}

func TestGaugeReplaces(t *testing.T) {
	s := NewSet(KindChannel, "c1", "file")
	s.Gauge("Closed", func() string { return "1" })
	s.Gauge("Closed", func() string { return "0" })
	var n int
	s.Each(func(name, value string) {
		if name == "Closed" {
			n++
			if value != "0" {
				t.Errorf("Closed = %q, want the later gauge's 0", value)
			}
		}
	})
	if n != 1 {
		t.Errorf("Closed shown %d times, want once", n)
	}
}

func TestStartedResetsCounters(t *testing.T) {
	c := NewSinkCounters("k1", "null")
	c.EventDrainSuccess.Add(5)
	c.Stopped()
	c.Started()
	got := map[string]string{}
	c.Each(func(n, v string) { got[n] = v })
	if got["EventDrainSuccessCount"] != "0" || got["StopTime"] != "0" || got["StartTime"] == "0" {
		t.Errorf("after Started: %v", got)
	}
}

// FuzzFormatFloat checks that every finite double prints in one of Java's
// two shapes and reads back as the same double.
func FuzzFormatFloat(f *testing.F) {
	for _, v := range []float64{0, 1, 12.5, 1e-3, 9.99e-4, 1e7, 9999999.5, math.MaxFloat64, 5e-324, -3.25} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		s := FormatFloat(v)
		back, err := strconv.ParseFloat(strings.Replace(s, "E", "e", 1), 64)
		if err != nil || back != v {
			t.Fatalf("FormatFloat(%v) = %q, reads back as %v, %v", v, s, back, err)
		}
		a := math.Abs(v)
		sci := strings.Contains(s, "E")
		if wantSci := a != 0 && (a < 1e-3 || a >= 1e7); sci != wantSci {
			t.Fatalf("FormatFloat(%v) = %q: scientific %v, want %v", v, s, sci, wantSci)
		}
		mant, _, _ := strings.Cut(s, "E")
		if i := strings.IndexByte(mant, '.'); i < 1 || i == len(mant)-1 {
			t.Fatalf("FormatFloat(%v) = %q: want digits on both sides of one point", v, s)
		}
	})
}
