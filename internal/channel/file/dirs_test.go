package filechannel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/wal"
)

// multi is a channel's directories with several data dirs.
type multi struct {
	ck   string
	data []string
}

func newMulti(t *testing.T, n int) multi {
	base := t.TempDir()
	m := multi{ck: filepath.Join(base, "ck")}
	for i := range n {
		m.data = append(m.data, filepath.Join(base, "data"+string(rune('a'+i))))
	}
	return m
}

func (m multi) props(extra map[string]string) map[string]string {
	p := map[string]string{"checkpointDir": m.ck, "dataDirs": strings.Join(m.data, ",")}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

func startMulti(t *testing.T, m multi, extra map[string]string) *Channel {
	t.Helper()
	return start(t, dirs{}, m.props(extra))
}

// recordBytes is how many bytes of records a dir's segments hold.
func recordBytes(t *testing.T, dir string) int64 {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	var n int64
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size() - wal.SegmentHeaderSize
	}
	return n
}

// Transactions are spread over every data dir, and a restart (from the
// checkpoint, or replaying the logs in full) brings back exactly the events
// not taken, in the order they were committed.
func TestSeveralDataDirs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(m multi)
	}{
		{"from checkpoint", func(multi) {}},
		{"full replay", func(m multi) { os.Remove(filepath.Join(m.ck, wal.CheckpointFile)) }},
		{"dirs reordered", func(m multi) { m.data[0], m.data[2] = m.data[2], m.data[0] }},
		{"dirs reordered and full replay", func(m multi) {
			m.data[0], m.data[2] = m.data[2], m.data[0]
			os.Remove(filepath.Join(m.ck, wal.CheckpointFile))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMulti(t, 3)
			c := startMulti(t, m, nil)
			putN(t, c, "e", 600, 10)
			for _, d := range m.data {
				if n := recordBytes(t, d); n < 4000 {
					t.Fatalf("data dir %s holds only %d bytes of records: transactions not spread", d, n)
				}
			}
			wantTake := bodies("e", 0, 250)
			if got := testutil.Bodies(testutil.TakeAll(t, c, 250, 33, time.Second)); strings.Join(got, ",") != strings.Join(wantTake, ",") {
				t.Fatalf("order across dirs broken: took %.200q", got)
			}
			if err := c.checkpoint(); err != nil {
				t.Fatal(err)
			}
			putN(t, c, "f", 100, 7) // after the checkpoint: replayed from the logs
			testutil.TakeAll(t, c, 50, 13, time.Second)
			stop(t, c)
			tc.before(m)

			c = startMulti(t, m, nil)
			defer stop(t, c)
			wantAll(t, c, append(bodies("e", 300, 600), bodies("f", 0, 100)...))
			if n := c.lostEvents.Load(); n != 0 {
				t.Fatalf("RecoveryLostEventCount = %d", n)
			}
		})
	}
}

// Damage confined to one data dir costs only the events put into it: the
// other dirs' events come back, in order, and the loss is counted.
func TestDamageInOneDataDir(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"segments deleted", func(t *testing.T, dir string) {
			segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
			for _, s := range segs {
				os.Remove(s)
			}
		}},
		{"segment truncated", func(t *testing.T, dir string) {
			segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
			if err := os.Truncate(segs[0], wal.SegmentHeaderSize+500); err != nil {
				t.Fatal(err)
			}
		}},
		{"dir removed from dataDirs", nil},
	} {
		for _, ck := range []bool{true, false} {
			name := tc.name + "/checkpoint=" + map[bool]string{true: "kept", false: "missing"}[ck]
			t.Run(name, func(t *testing.T) {
				m := newMulti(t, 2)
				c := startMulti(t, m, map[string]string{"checkpointOnClose": "false"})
				// Events 0-9 go to one dir, 10-19 to the other, and so on.
				putN(t, c, "e", 200, 10)
				if ck {
					if err := c.checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
				first := c.queue.buf[c.queue.head].dir // the dir holding e0-e9
				stop(t, c)
				if !ck {
					os.Remove(filepath.Join(m.ck, wal.CheckpointFile))
				}
				bad := m.data[1-first]
				if tc.damage != nil {
					tc.damage(t, bad)
				} else {
					m.data = []string{m.data[first]}
				}

				c = startMulti(t, m, nil)
				defer stop(t, c)
				// Every event of the intact dir comes back, in order; the
				// damaged dir's come back only where intact; the rest are
				// counted as lost when a checkpoint said they were held.
				got := testutil.Bodies(testutil.TakeAll(t, c, 201, 97, 100*time.Millisecond))
				prev, fromBad := -1, 0
				seen := map[int]bool{}
				for _, b := range got {
					i, err := strconv.Atoi(strings.TrimPrefix(b, "e"))
					if err != nil || i <= prev {
						t.Fatalf("events out of order or mangled: %q", got)
					}
					prev = i
					seen[i] = true
					if (i/10)%2 == 1 {
						fromBad++
					}
				}
				for i := 0; i < 200; i++ {
					if (i/10)%2 == 0 && !seen[i] {
						t.Fatalf("event e%d of the intact dir missing: %q", i, got)
					}
				}
				lost := c.lostEvents.Load()
				if c.Len() != 0 {
					t.Fatalf("%d events left after taking everything", c.Len())
				}
				t.Logf("damaged dir: %d events kept, %d counted lost; log damaged regions %d", fromBad, lost, c.walStats().LostRegions)
				if ck && int(lost)+fromBad != 100 {
					t.Fatalf("RecoveryLostEventCount = %d with %d of the damaged dir's 100 events kept", lost, fromBad)
				}
				if tc.damage == nil && fromBad != 0 {
					t.Fatalf("%d events of a dir no longer configured came back", fromBad)
				}
			})
		}
	}
}

// A data dir whose disk is below minimumRequiredSpace gets no puts; the
// others take them. With every dir low, puts fail and takes go on.
func TestDiskFullInOneDataDir(t *testing.T) {
	m := newMulti(t, 2)
	c, _ := build(t, dirs{}, m.props(map[string]string{"minimumRequiredSpace": "1000"}))
	var lowA, lowB atomic.Bool
	c.freeSpace = func(dir string) (int64, error) {
		if dir == m.data[0] && lowA.Load() || dir == m.data[1] && lowB.Load() {
			return 10, nil
		}
		return 1 << 30, nil
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, c)
	look := func() {
		c.mu.Lock()
		c.lastSpace = time.Time{} // do not wait out the statfs cache
		// and drop what the watcher read before the change (it applies a
		// reading only when none newer was taken since it began)
		c.spaceAt = time.Now()
		c.mu.Unlock()
	}
	lowA.Store(true)
	look()
	before := recordBytes(t, m.data[0])
	putN(t, c, "a", 100, 10)
	if n := recordBytes(t, m.data[0]); n != before {
		t.Fatalf("a dir below minimumRequiredSpace got %d bytes of puts", n-before)
	}
	lowB.Store(true)
	look()
	if err := testutil.PutCommit(c, testutil.Events("b", 1)); !errors.Is(err, flow.ErrChannelFull) {
		t.Fatalf("put with every dir low: %v", err)
	}
	if got := testutil.TakeAll(t, c, 10, 10, time.Second); len(got) != 10 {
		t.Fatalf("take with every dir low got %d", len(got))
	}
	lowA.Store(false)
	lowB.Store(false)
	look()
	putN(t, c, "c", 20, 10)
	wantAll(t, c, append(bodies("a", 10, 100), bodies("c", 0, 20)...))
}

// A take transaction over events from several dirs writes a take record
// into each; concurrent producers and consumers over three dirs lose and
// duplicate nothing across a restart.
func TestSeveralDataDirsConcurrent(t *testing.T) {
	m := newMulti(t, 3)
	c := startMulti(t, m, map[string]string{"checkpointInterval": "100"})
	const producers, per = 4, 500
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			putN(t, c, "p"+string(rune('0'+p))+"-", per, 10)
		}()
	}
	taken := map[string]int{}
	for len(taken) < producers*per/2 {
		for _, e := range testutil.TakeAll(t, c, 50, 25, time.Second) {
			taken[string(e.Body)]++
		}
	}
	wg.Wait()
	stop(t, c)
	c = startMulti(t, m, nil)
	defer stop(t, c)
	for _, e := range testutil.TakeAll(t, c, producers*per, 100, 200*time.Millisecond) {
		taken[string(e.Body)]++
	}
	if len(taken) != producers*per {
		t.Fatalf("%d distinct events after restart, want %d", len(taken), producers*per)
	}
	for k, n := range taken {
		if n != 1 {
			t.Fatalf("event %s delivered %d times", k, n)
		}
	}
}
