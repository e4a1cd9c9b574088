package flow

import (
	"github.com/sluicehq/sluice/internal/config"
)

// How a source cuts its input into batches. Every source that makes its own
// batches (netcat, syslogtcp, multiport_syslogtcp, syslogudp, exec, taildir,
// spooldir) follows one rule, and takes its limit from Batching:
//
//  1. A batch never waits for input. As soon as the source holds one
//     complete event it puts a batch, so a lone event goes at once and a low
//     rate keeps its latency (there is no batch timer to wait for).
//  2. A batch takes every further complete event the source already holds
//     (read from a socket, a pipe or a file, queued from datagrams), up to
//     the limit, so under load batches grow by themselves: the input that
//     arrived while the last batch was being committed is the next batch.
//  3. The limit is batchSize when the user set it: a maximum, as in Flume.
//     When batchSize is left at its default, the limit is the smallest
//     transactionCapacity of the channels the source puts into (never below
//     the default, never above MaxAdaptiveBatch): a batch can then grow to
//     one whole transaction, which is one commit, and with the file channel
//     one share of an fdatasync. With batches of 100 a busy file channel
//     spends most of its time on commits; with the channel's own
//     transactionCapacity (1000 is usual) it commits a tenth as often, and
//     nothing is tuned for it. What a batch holds in bytes stays bounded by
//     each source's read buffer.
//
// Sources whose batch is made by the sender (avro, thrift and http: one
// request is one batch) have no batchSize; concurrent requests share the
// file channel's fdatasync (group commit), whatever their size.

// DefaultBatchSize is batchSize's default for most sources (Flume's).
const DefaultBatchSize = 100

// MaxAdaptiveBatch bounds the limit of a source whose batchSize is left at
// its default, whatever the channels' transactionCapacity: the file
// channel's default transactionCapacity (Flume's).
const MaxAdaptiveBatch = 10000

// Batching is a source's batchSize as configured: a value the user set
// (explicit) or the source's default.
type Batching struct {
	size     int
	explicit bool
}

// ReadBatching reads key (batchSize) from p, in [1, 1<<20], with def as
// the default.
func ReadBatching(p *config.Props, key string, def int) Batching {
	explicit := p.Has(key)
	size := p.IntRange(key, def, 1, 1<<20)
	return Batching{size: size, explicit: explicit}
}

// FixedBatching is a batchSize that is a fixed maximum, as if set by the
// user (for tests and for sources built outside a config).
func FixedBatching(size int) Batching { return Batching{size: max(size, 1), explicit: true} }

// DefaultBatching is a batchSize left at its default def.
func DefaultBatching(def int) Batching { return Batching{size: max(def, 1)} }

// Size is the configured batchSize, or the default: what a source's
// BatchSize reports, so the agent can check it against the channels'
// transactionCapacity as Flume does.
func (b Batching) Size() int { return b.size }

// Explicit reports whether the user set batchSize.
func (b Batching) Explicit() bool { return b.explicit }

// Limit is the most events one batch of the source may hold when it puts
// through p: Size when explicit; else p's TxLimit (the smallest
// transactionCapacity of its channels), at least Size and at most
// MaxAdaptiveBatch. A processor that does not know its channels' limit
// gets Size.
func (b Batching) Limit(p Processor) int {
	if b.explicit {
		return b.size
	}
	tl, ok := p.(TxLimiter)
	if !ok {
		return b.size
	}
	n := tl.TxLimit()
	if n <= 0 {
		return b.size
	}
	return max(b.size, min(n, MaxAdaptiveBatch))
}

// TxLimiter is implemented by processors that know the transactionCapacity
// of the channels they put into (the ChannelProcessor).
type TxLimiter interface {
	// TxLimit is the smallest transactionCapacity of the channels, or 0
	// when none has one.
	TxLimit() int
}
