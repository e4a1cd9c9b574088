package aliaschannel

import (
	"math"
	"strconv"

	"github.com/sluicehq/sluice/internal/channel/file"
	"github.com/sluicehq/sluice/internal/channel/memory"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
)

// Flume's defaults for the spillable memory channel.
const (
	DefaultSpillMemoryCapacity   = 10000
	DefaultSpillOverflowCapacity = 100000000
	DefaultSpillAvgEventSize     = 500
)

// NewSpillable builds Flume's spillable memory channel (SPILLABLEMEMORY,
// org.apache.flume.channel.SpillableMemoryChannel) from its properties:
//
//   - overflowCapacity = 0 ("function purely as an in-memory channel"): a
//     memory channel of memoryCapacity events (byteCapacity and
//     byteCapacityBufferPercentage as the memory channel reads them).
//   - otherwise: a file channel of memoryCapacity + overflowCapacity events,
//     with the file channel keys given (checkpointDir, dataDirs, ...). The
//     in-memory queue becomes the file channel's cache of recent events
//     (cacheBytes): byteCapacity if set, else memoryCapacity × avgEventSize
//     (the file channel's default when memoryCapacity is 0, "function like a
//     file channel").
//
// The difference, said at start: Flume keeps up to memoryCapacity events
// in memory only, and loses them in a crash; here every event is on disk
// before its put returns. sluice's file channel runs at about half the
// memory channel's throughput with group commit, which is what the
// spillable channel was meant to buy.
func NewSpillable(env flow.Env, p *config.Props) (flow.Channel, error) {
	mem := p.IntRange("memoryCapacity", DefaultSpillMemoryCapacity, 0, math.MaxInt32)
	over := p.IntRange("overflowCapacity", DefaultSpillOverflowCapacity, 0, math.MaxInt32)
	avg := p.IntRange("avgEventSize", DefaultSpillAvgEventSize, 1, math.MaxInt32)
	p.Ignored("overflowTimeout", "a put that finds the channel full waits keep-alive (3 s) for space, as any sluice channel")
	// Flume: "any file channel property with the exception of 'keep-alive'
	// and 'capacity' can be used"; keep-alive is the spillable channel's
	// own, which the channel underneath reads.
	p.Ignored("capacity", "the spillable memory channel sets it (memoryCapacity + overflowCapacity), as in Flume")
	if mem == 0 && over == 0 {
		// As Flume, which warns and takes the default.
		p.Warnf("overflowCapacity", "memoryCapacity and overflowCapacity are both 0, so the channel could hold nothing; overflowCapacity is %d (its default), as in Flume", DefaultSpillOverflowCapacity)
		over = DefaultSpillOverflowCapacity
	}
	if over == 0 {
		p.Set("capacity", strconv.Itoa(mem), "memoryCapacity")
		p.Notef("type", "runs as a memory channel of %d events (overflowCapacity = 0)", mem)
		return memorychannel.New(env, p)
	}
	p.Set("capacity", strconv.Itoa(mem+over), "overflowCapacity")
	if !p.Has("transactionCapacity") && mem+over < filechannel.DefaultTransactionCapacity {
		p.Set("transactionCapacity", strconv.Itoa(mem+over), "overflowCapacity") // a transaction must fit
	}
	cache := int64(-1) // the file channel's default
	switch {
	case p.Has("byteCapacity"):
		cache = p.Int64("byteCapacity", 0)
		if cache < 0 {
			cache = 0
		}
	case mem > 0:
		cache = int64(mem) * int64(avg)
	default:
		p.Ignored("byteCapacity", "memoryCapacity = 0: there is no in-memory queue")
	}
	if cache >= 0 {
		p.Set("cacheBytes", strconv.FormatInt(cache, 10), "memoryCapacity")
	}
	p.Ignored("byteCapacityBufferPercentage", "the file channel's cache counts whole events, headers included")
	p.Notef("type", "runs as a file channel of %d events: every event is on disk before its put returns, "+
		"where Flume kept up to memoryCapacity events in memory only (and lost them in a crash); recent events stay in memory for takes (cacheBytes)", mem+over)
	return filechannel.New(env, p)
}
