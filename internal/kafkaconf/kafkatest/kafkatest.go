// Package kafkatest runs an in-process Kafka (franz-go's kfake) for the
// Kafka components' tests, with the one fault a real broker cannot be asked
// for: becoming unreachable and coming back on the same address. It also
// holds what those tests measure: the process's CPU time and the log lines
// a component writes.
package kafkatest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Cluster is a running kfake cluster.
type Cluster struct {
	*kfake.Cluster
	Addrs []string

	opts []kfake.Opt             // without the ports, for RestartEmpty
	wrap func(net.Conn) net.Conn // what sits between kfake and its clients (GSSAPI)
	mu   sync.Mutex
	lns  []*switchListener
}

// New starts a cluster of brokers brokers with topics seeded with
// partitions partitions each, and stops it at the end of the test.
func New(tb testing.TB, brokers int, partitions int32, topics ...string) *Cluster {
	tb.Helper()
	return newCluster(tb, brokers, partitions, topics, true, nil)
}

// NewSASL starts a one-broker cluster that requires SASL (mechanism PLAIN,
// SCRAM-SHA-256 or SCRAM-SHA-512) with user and pass as superuser.
func NewSASL(tb testing.TB, mechanism, user, pass string, topics ...string) *Cluster {
	tb.Helper()
	return newCluster(tb, 1, 1, topics, true, []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(mechanism, user, pass)})
}

// NewTLS starts a one-broker cluster that speaks TLS with cfg.
func NewTLS(tb testing.TB, cfg *tls.Config, topics ...string) *Cluster {
	tb.Helper()
	return newCluster(tb, 1, 1, topics, true, []kfake.Opt{kfake.TLS(cfg)})
}

// NewNoAutoCreate is New for a cluster that does not create topics on
// demand (auto.create.topics.enable = false, as many production clusters
// run): a deleted topic stays missing until it is created again.
func NewNoAutoCreate(tb testing.TB, brokers int, partitions int32, topics ...string) *Cluster {
	tb.Helper()
	return newCluster(tb, brokers, partitions, topics, false, nil)
}

func newCluster(tb testing.TB, brokers int, partitions int32, topics []string, autoCreate bool, extra []kfake.Opt) *Cluster {
	return newClusterInto(tb, &Cluster{}, brokers, partitions, topics, autoCreate, extra)
}

func newClusterInto(tb testing.TB, c *Cluster, brokers int, partitions int32, topics []string, autoCreate bool, extra []kfake.Opt) *Cluster {
	opts := []kfake.Opt{
		kfake.NumBrokers(brokers),
		kfake.ListenFn(c.listen),
		kfake.DefaultNumPartitions(int(partitions)),
	}
	if autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	opts = append(opts, extra...)
	kc, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	c.Cluster, c.opts = kc, opts
	c.Addrs = kc.ListenAddrs()
	tb.Cleanup(kc.Close)
	return c
}

// RestartEmpty replaces the cluster by a new one on the same addresses
// that knows nothing of the old one's records, topic IDs and consumer
// groups, as a broker whose disk was wiped does; the topics it was seeded
// with exist again, empty, under new topic IDs. Connections to the old
// cluster are reset.
func (c *Cluster) RestartEmpty(tb testing.TB) {
	tb.Helper()
	c.Down()
	c.Close()
	ports := make([]int, len(c.Addrs))
	for i, a := range c.Addrs {
		_, p, err := net.SplitHostPort(a)
		if err == nil {
			ports[i], err = strconv.Atoi(p)
		}
		if err != nil {
			tb.Fatalf("broker address %q: %v", a, err)
		}
	}
	c.mu.Lock()
	c.lns = nil
	c.mu.Unlock()
	var kc *kfake.Cluster
	var err error
	for i := 0; i < 50; i++ { // the old listeners may take a moment to release the ports
		if kc, err = kfake.NewCluster(append(c.opts[:len(c.opts):len(c.opts)], kfake.Ports(ports...))...); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("restart the cluster on %v: %v", c.Addrs, err)
	}
	c.Cluster = kc
	tb.Cleanup(kc.Close)
}

// Recreate deletes topic and creates it again with partitions partitions:
// the new topic has the old name and a new topic ID, as after
// kafka-topics.sh --delete and --create, or a cluster restarted empty.
func (c *Cluster) Recreate(tb testing.TB, topic string, partitions int32) {
	tb.Helper()
	c.Delete(tb, topic)
	c.Create(tb, topic, partitions)
}

// Delete deletes topic, with the records it holds and the consumer groups'
// offsets for it.
func (c *Cluster) Delete(tb testing.TB, topic string) {
	tb.Helper()
	if err := c.DeleteTopic(topic); err != nil {
		tb.Fatalf("delete topic %s: %v", topic, err)
	}
}

// Create creates topic with partitions partitions.
func (c *Cluster) Create(tb testing.TB, topic string, partitions int32) {
	tb.Helper()
	if err := c.CreateTopic(topic, partitions, nil); err != nil {
		tb.Fatalf("create topic %s: %v", topic, err)
	}
}

// Brokers is the bootstrap.servers value for the cluster.
func (c *Cluster) Brokers() string {
	s := ""
	for i, a := range c.Addrs {
		if i > 0 {
			s += ","
		}
		s += a
	}
	return s
}

func (c *Cluster) listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	s := &switchListener{ln: ln, addr: ln.Addr().String(), conns: map[net.Conn]bool{}, up: make(chan struct{})}
	close(s.up)
	c.mu.Lock()
	c.lns = append(c.lns, s)
	c.mu.Unlock()
	if c.wrap != nil {
		return wrapListener{s, c.wrap}, nil
	}
	return s, nil
}

// Down makes every broker unreachable: open connections are reset and new
// ones refused (the listening sockets are closed), while the cluster keeps
// its data.
func (c *Cluster) Down() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.lns {
		s.down()
	}
}

// Up reopens the brokers on their addresses.
func (c *Cluster) Up(tb testing.TB) {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.lns {
		if err := s.reopen(); err != nil {
			tb.Fatalf("reopen broker listener: %v", err)
		}
	}
}

// switchListener is a broker's listener that can be closed and reopened on
// the same address while the broker's accept loop waits.
type switchListener struct {
	addr string

	mu     sync.Mutex
	ln     net.Listener
	up     chan struct{} // closed while up
	conns  map[net.Conn]bool
	closed bool
}

func (s *switchListener) Accept() (net.Conn, error) {
	for {
		s.mu.Lock()
		ln, up, closed := s.ln, s.up, s.closed
		s.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		<-up
		if ln == nil {
			continue
		}
		conn, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			same := s.ln == ln && !s.closed
			s.mu.Unlock()
			if same && !errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			continue // taken down (or closed): wait for the next state
		}
		s.mu.Lock()
		if s.ln != ln || s.closed {
			s.mu.Unlock()
			_ = conn.Close()
			continue
		}
		tc := &trackedConn{Conn: conn, s: s}
		s.conns[tc] = true
		s.mu.Unlock()
		return tc, nil
	}
}

func (s *switchListener) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return
	}
	_ = s.ln.Close()
	s.ln = nil
	s.up = make(chan struct{})
	for c := range s.conns {
		if tc, ok := c.(*trackedConn); ok {
			if t, ok := tc.Conn.(*net.TCPConn); ok {
				_ = t.SetLinger(0) // reset, as a dead host's peer would see
			}
		}
		_ = c.(*trackedConn).Conn.Close() // not c.Close, which takes s.mu
	}
	s.conns = map[net.Conn]bool{}
	// Wake the accept loop blocked on the old listener: it waits on up.
}

func (s *switchListener) reopen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	s.ln = ln
	close(s.up)
	return nil
}

func (s *switchListener) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.ln != nil {
		_ = s.ln.Close()
	} else {
		close(s.up) // release a waiting Accept
	}
	return nil
}

func (s *switchListener) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, _ := net.ResolveTCPAddr("tcp", s.addr)
	return a
}

type trackedConn struct {
	net.Conn
	s *switchListener
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// ReadAll consumes topic from its start, without a group, until it has n
// records or timeout passes, and returns them.
func ReadAll(tb testing.TB, brokers []string, topic string, n int, timeout time.Duration) []*kgo.Record {
	tb.Helper()
	return readAll(tb, []kgo.Opt{kgo.SeedBrokers(brokers...)}, topic, n, timeout)
}

// ReadAllSASL is ReadAll on a SASL cluster (see NewSASL).
func ReadAllSASL(tb testing.TB, c *Cluster, mechanism, user, pass, topic string, n int, timeout time.Duration) []*kgo.Record {
	tb.Helper()
	var m sasl.Mechanism
	switch mechanism {
	case "PLAIN":
		m = plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "SCRAM-SHA-256":
		m = scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	default:
		m = scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	}
	return readAll(tb, []kgo.Opt{kgo.SeedBrokers(c.Addrs...), kgo.SASL(m)}, topic, n, timeout)
}

func readAll(tb testing.TB, opts []kgo.Opt, topic string, n int, timeout time.Duration) []*kgo.Record {
	return readUntil(tb, opts, []string{topic}, timeout, func(recs []*kgo.Record) bool { return len(recs) >= n })
}

// ReadUntil consumes topics from their start, without a group, until done
// says it has what it wants or timeout passes, and returns what it read.
func ReadUntil(tb testing.TB, brokers []string, topics []string, timeout time.Duration, done func([]*kgo.Record) bool) []*kgo.Record {
	tb.Helper()
	return readUntil(tb, []kgo.Opt{kgo.SeedBrokers(brokers...)}, topics, timeout, done)
}

func readUntil(tb testing.TB, opts []kgo.Opt, topics []string, timeout time.Duration, done func([]*kgo.Record) bool) []*kgo.Record {
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for !done(out) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachError(func(t string, p int32, err error) { tb.Logf("fetch %s/%d: %v", t, p, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// Produce writes records (topic set on each) and fails the test unless
// every one was acknowledged.
func Produce(tb testing.TB, brokers []string, recs ...*kgo.Record) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		tb.Fatalf("produce: %v", err)
	}
}

// Logs is where a component under test logs (Logger), for tests that
// count what it says.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Logger logs text lines at info level and above into l.
func (l *Logs) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Lines returns the lines logged so far.
func (l *Logs) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(l.buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Count is how many lines logged so far contain substr.
func (l *Logs) Count(substr string) int {
	n := 0
	for _, line := range l.Lines() {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// Outage is how long a test keeps a topic missing or the brokers down: a
// few seconds by default, 30 s with SLUICE_LONG=1.
func Outage() time.Duration {
	if os.Getenv("SLUICE_LONG") != "" {
		return 30 * time.Second
	}
	return 3 * time.Second
}

// CheckOutageLog checks what a component logged over one broker outage:
// its one failure streak, as every component tells one
// (logthrottle.Streak): the first line at WARN, with failed as its message
// and the refused connection in its error, at most one summary per 30 s of
// the outage plus one at its end, then one INFO line recovered, and
// nothing else: no ERROR, none of kgo's own lines.
//
// A run of failures that ends by staleness (a consumer group error that
// stops coming) ends at the component's next look at its health, so the
// recovery is awaited for a while.
func CheckOutageLog(tb testing.TB, l *Logs, failed, recovered string) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for l.Count(`msg="`+recovered+`"`) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	lines := l.Lines()
	tb.Logf("%d log lines over the outage:\n%s", len(lines), strings.Join(lines, "\n"))
	if len(lines) < 2 {
		tb.Fatalf("%d lines, want the outage's first line and its recovery", len(lines))
	}
	first, last := lines[0], lines[len(lines)-1]
	if !strings.Contains(first, `level=WARN msg="`+failed+`"`) || !strings.Contains(first, "connection refused") {
		tb.Errorf("first line %q: want WARN %q naming the refused connection", first, failed)
	}
	if !strings.Contains(last, `level=INFO msg="`+recovered+`"`) || !strings.Contains(last, "recovered_after=") {
		tb.Errorf("last line %q: want INFO %q with recovered_after", last, recovered)
	}
	maxSummaries := 1 + int(Outage()/(30*time.Second))
	for _, line := range lines[1 : len(lines)-1] {
		if !strings.Contains(line, `level=WARN msg="`+failed+` (repeated)"`) {
			tb.Errorf("line %q inside the outage: want only its summaries", line)
		}
	}
	if n := len(lines) - 2; n > maxSummaries {
		tb.Errorf("%d summaries over a %v outage, want at most %d", n, Outage(), maxSummaries)
	}
}

// MaxOutageLogLines bounds what a component may log over an Outage: a few
// lines at its start, then, for each kind of message that keeps coming, one
// summary per 10 s (logthrottle), where it used to log thousands a second.
func MaxOutageLogLines() int { return 10 + 5*int(Outage()/(10*time.Second)) }
