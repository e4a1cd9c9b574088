package kafkaconf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/logthrottle"
)

// DefaultHealthGrace is how long a Kafka component may fail to reach its
// brokers or its topic before /healthz reports it: long enough to ride out
// a broker restart or a leader election, short enough for a supervisor to
// act within a minute.
const DefaultHealthGrace = 30 * time.Second

// ReadHealthGrace reads healthGraceMillis (sluice's own property).
func ReadHealthGrace(p *config.Props) time.Duration {
	return time.Duration(p.IntRange("healthGraceMillis", int(DefaultHealthGrace/time.Millisecond), 1, math.MaxInt32)) * time.Millisecond
}

// Health tracks whether a Kafka component can do its work, for
// flow.HealthReporter. Each cause of failure has a key ("brokers", "topic
// t", "delivery", ...): Fail starts or continues a run of failures of that
// key, OK ends it. Err reports the oldest run that has lasted longer than
// the grace period. It is the state now, never a latched past: a run ends
// with OK, or, for failures recorded with a staleness bound, when no
// failure of that key came for that long (the component stopped trying, so
// the failure can no longer be told).
//
// With Tell, Health also logs: a component's runs of failures, whatever
// their keys, make one failure streak (logthrottle.Streak), which starts
// when the first key fails and ends, with one "recovered" line, when no key
// fails any more. That is the component's one line per outage.
type Health struct {
	grace time.Duration

	mu     sync.Mutex
	fails  map[string]*failure
	streak *logthrottle.Streak // nil: no logs
}

type failure struct {
	since, last time.Time
	err         error
	stale       time.Duration // 0: until OK
}

// NewHealth returns a tracker that reports failures lasting longer than
// grace.
func NewHealth(grace time.Duration) *Health {
	return &Health{grace: grace, fails: map[string]*failure{}}
}

// Grace is the grace period.
func (h *Health) Grace() time.Duration { return h.grace }

// Tell makes h log the component's failures through l, as one streak:
// failed is the message of its failure lines, recovered of its last line.
// Call it before the first Fail.
func (h *Health) Tell(l *slog.Logger, failed, recovered string) {
	h.streak = &logthrottle.Streak{Log: l, Level: slog.LevelWarn, Failed: failed, Recovered: recovered}
}

// Fail records a failure of key. stale > 0 ends the run when no further
// failure of key is recorded within stale; 0 keeps it until OK(key). It
// returns err marked as told when h logs (see Tell).
func (h *Health) Fail(key string, err error, stale time.Duration) error {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.fails[key]
	if f == nil || f.expired(now) {
		f = &failure{since: now}
		h.fails[key] = f
	}
	f.last, f.err, f.stale = now, err, stale
	// Settled after recording this failure: the runs of other keys that
	// went stale end, but the component's streak goes on with this one
	// rather than "recovering" for an instant and failing again.
	h.settleLocked(now)
	if h.streak == nil {
		return err
	}
	return h.streak.Fail(err)
}

// OK ends the run of failures of key.
func (h *Health) OK(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, failing := h.fails[key]
	delete(h.fails, key)
	if failing || h.streak != nil && h.streak.Failing() {
		h.settleLocked(time.Now())
	}
}

// settleLocked drops the runs that ended by staleness, and ends the
// streak when no run is left. Lock mu.
func (h *Health) settleLocked(now time.Time) {
	for k, f := range h.fails {
		if f.expired(now) {
			delete(h.fails, k)
		}
	}
	if len(h.fails) == 0 && h.streak != nil {
		h.streak.Ok()
	}
}

// Stop writes the summary of a streak still under way, for a component
// that stops while failing.
func (h *Health) Stop() {
	if h.streak != nil {
		h.streak.Stop()
	}
}

// Failing reports whether key is in a run of failures (of any length).
func (h *Health) Failing(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.fails[key]
	return f != nil && !f.expired(time.Now())
}

func (f *failure) expired(now time.Time) bool {
	return f.stale > 0 && now.Sub(f.last) > f.stale
}

// Err returns nil when no run of failures has lasted longer than the grace
// period, else the reasons of those that have, oldest first, each with how
// long it has lasted.
func (h *Health) Err() error {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	type run struct {
		since time.Time
		err   error
	}
	var runs []run
	h.settleLocked(now)
	for _, f := range h.fails {
		if now.Sub(f.since) >= h.grace {
			runs = append(runs, run{f.since, f.err})
		}
	}
	if len(runs) == 0 {
		return nil
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].since.Before(runs[j].since) })
	msgs := make([]string, len(runs))
	for i, r := range runs {
		msgs[i] = fmt.Sprintf("%v (for %v)", r.err, now.Sub(r.since).Round(time.Second))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Probe is a component's periodic check of its brokers (and topics): a
// metadata request every interval, so that an idle component, or one whose
// requests hang, still knows whether Kafka answers.
type Probe struct {
	Client   *kgo.Client
	Brokers  []string // for the message
	Health   *Health
	Interval time.Duration
	// Topics, when set, are looked up too: a topic Kafka does not know
	// fails the key "exists <topic>" until it is there again.
	Topics []string
}

// ProbeInterval is how often a component with grace period grace probes:
// often enough that a failure is seen well within the grace period, at
// most every 10 s (a metadata request of a few bytes).
func ProbeInterval(grace time.Duration) time.Duration {
	return min(max(grace/3, 50*time.Millisecond), 10*time.Second)
}

// Run probes until ctx ends.
func (p *Probe) Run(ctx context.Context) {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		p.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Probe) once(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, min(p.Interval, 5*time.Second))
	defer cancel()
	// Ping asks each known broker once, without the client's retries, so
	// a dead cluster fails it with the dial error rather than a timeout.
	if err := p.Client.Ping(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // stopping
		}
		p.Health.Fail("brokers", fmt.Errorf("no Kafka broker answers (%s): %w", strings.Join(p.Brokers, ","), err), 0)
		return
	}
	p.Health.OK("brokers")
	if len(p.Topics) == 0 {
		return
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range p.Topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, p.Client)
	if err != nil {
		return // the next Ping tells whether the brokers are the cause
	}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		key := "exists " + *t.Topic
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			p.Health.Fail(key, fmt.Errorf("topic %s does not exist", *t.Topic), 0)
		case err != nil:
			// Authorization and the like: the fetches and produces
			// that fail tell it with their own errors.
		default:
			p.Health.OK(key)
		}
	}
}

// FetchError is the health reason for an error a consumer's poll returned
// for topic and partition; kgo reports a failing consumer group (a broker
// that cannot be reached for the join, say) with an empty topic.
func FetchError(topic string, partition int32, err error) error {
	if topic == "" {
		return fmt.Errorf("the consumer group fails: %w", err)
	}
	return fmt.Errorf("reading topic %s partition %d fails: %w", topic, partition, err)
}

// TopicGone reports whether err says the client's idea of a topic is stale:
// the topic was deleted (and perhaps created again under a new topic ID,
// or the cluster restarted empty). franz-go never adopts a topic's new ID by
// itself; the client has to purge the topic and add it again.
func TopicGone(err error) bool {
	return errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.InconsistentTopicID)
}

// Recreated remembers the topics a consumer purged and subscribed to again
// after they were deleted (see TopicGone), so that their partitions start
// at the beginning when the group has no committed offset for them: every
// record of a re-created topic was written after the old topic, which the
// group had been reading, so auto.offset.reset's latest would skip records
// written between the re-creation and the new subscription.
type Recreated struct {
	mu     sync.Mutex
	topics map[string]bool
}

// Mark records topics as re-created.
func (r *Recreated) Mark(topics ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.topics == nil {
		r.topics = map[string]bool{}
	}
	for _, t := range topics {
		r.topics[t] = true
	}
}

// AdjustOffsets is a kgo.AdjustFetchOffsetsFn: partitions of a re-created
// topic without a committed offset start at their beginning.
func (r *Recreated) AdjustOffsets(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, ps := range offsets {
		if !r.topics[t] {
			continue
		}
		for p, o := range ps {
			if o.EpochOffset().Offset < 0 { // no commit: the reset offset
				ps[p] = kgo.NewOffset().AtStart()
			}
		}
	}
	return offsets, nil
}

// FetchStale is how long a consumer's fetch failure counts for health
// without being repeated: shorter than the grace period, so that a single
// failure never makes the component unhealthy, and longer than the pause
// between failing polls (FetchBackoff), so that a lasting one does.
func FetchStale(grace time.Duration) time.Duration {
	return min(max(grace/2, 10*time.Millisecond), 10*time.Second)
}

// FetchBackoff is the pause after the n-th consecutive poll that brought
// only errors: kgo returns a failing partition's error at once on every
// poll, so polling again straight away would spin a core.
func FetchBackoff(grace time.Duration) func(n int) time.Duration {
	return Backoff(50*time.Millisecond, max(min(time.Second, FetchStale(grace)/3), 50*time.Millisecond))
}

// Sleep waits d or until ctx ends; false means ctx ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
