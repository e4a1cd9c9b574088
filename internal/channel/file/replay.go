package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/sluicehq/sluice/internal/wal"
)

// replayState is what Start rebuilds from the checkpoint and the log.
type replayState struct {
	queue          deque
	cached         int64
	live           map[uint64]int
	nextTx         uint64
	records        int
	fromCheckpoint bool
	took           time.Duration
}

// pendingTx is a put transaction seen in the log without its commit yet.
type pendingTx struct {
	txid    uint64
	entries []entry
	damage  int // the reader's damaged-region count when its first put was read
}

// loadCheckpoint reads the main checkpoint, else the backup one. A missing
// or damaged checkpoint is logged, not an error: the caller replays every
// segment instead.
func (c *Channel) loadCheckpoint() (wal.Checkpoint, uint64, []wal.Position, bool) {
	for _, dir := range []string{c.ckDir, c.backupDir} {
		if dir == "" {
			continue
		}
		ck, err := wal.ReadCheckpoint(dir)
		if err == nil {
			nextTx, pos, derr := decodeCheckpoint(ck.Payload)
			if derr == nil {
				return ck, nextTx, pos, true
			}
			err = derr
		}
		if errors.Is(err, wal.ErrNoCheckpoint) {
			c.log.Info("file channel: no checkpoint", "channel", c.name, "dir", dir)
		} else {
			c.log.Warn("file channel: checkpoint unusable", "channel", c.name, "dir", dir, "err", err)
		}
	}
	return wal.Checkpoint{}, 0, nil, false
}

// replay rebuilds the channel's queue: the checkpoint's events, then the
// log's records after the checkpoint's position. See records.go for the
// records and docs/format/wal.md for how damage is skipped.
func (c *Channel) replay(w *wal.Log) (*replayState, error) {
	start := time.Now()
	st := &replayState{live: make(map[uint64]int), nextTx: uint64(time.Now().UnixNano())}
	var lost int64
	ck, nextTx, ckPos, ok := c.loadCheckpoint()
	var items []entry // in queue order; a zero pos marks a taken one
	from := wal.Position{}
	first := w.FirstSegment()
	if ok {
		st.fromCheckpoint = true
		st.nextTx = max(st.nextTx, nextTx)
		from = ck.Position
		items = make([]entry, 0, len(ckPos))
		for _, p := range ckPos {
			if p.Segment < first {
				lost++ // its segment is gone
				continue
			}
			items = append(items, entry{pos: p})
		}
	}

	var index map[wal.Position]int // built at the first take record
	add := func(e entry) {
		if index != nil {
			index[e.pos] = len(items)
		}
		items = append(items, e)
	}
	pending := make(map[uint64]*pendingTx)
	r := w.NewReader(from)
	defer r.Close()
	for r.Next() {
		b, pos := r.Record(), r.Position()
		st.records++
		if len(b) == 0 {
			lost++
			continue
		}
		switch b[0] {
		case kindPut:
			if len(b) < putFixed {
				lost++
				continue
			}
			txid := binary.LittleEndian.Uint64(b[1:9])
			e := entry{pos: pos, size: int32(len(b))}
			if st.cached+int64(e.size) <= c.cacheBudget {
				// Decode only what the memory budget will hold.
				_, ev, err := decodePut(b)
				if err != nil {
					lost++
					continue
				}
				e.ev = &ev
				st.cached += int64(e.size)
			}
			p := pending[txid]
			if p == nil {
				regions, _ := r.Damaged()
				p = &pendingTx{txid: txid, damage: regions}
				pending[txid] = p
			}
			p.entries = append(p.entries, e)
		case kindCommit:
			txid, n, err := decodeTx(b, kindCommit)
			if err != nil {
				lost++ // a damaged commit; its puts are kept below
				continue
			}
			p := pending[txid]
			delete(pending, txid)
			got := 0
			if p != nil {
				got = len(p.entries)
				for _, e := range p.entries {
					add(e)
				}
			}
			if n > got {
				lost += int64(n - got) // puts lost in a damaged region
			}
		case kindTake:
			if index == nil {
				index = make(map[wal.Position]int, len(items))
				for i, e := range items {
					index[e.pos] = i
				}
			}
			if _, err := decodePositions(b[1:], func(p wal.Position) {
				if i, ok := index[p]; ok {
					if items[i].ev != nil {
						st.cached -= int64(items[i].size)
					}
					items[i] = entry{}
					delete(index, p)
				}
			}); err != nil {
				lost++ // a damaged take: its events may be taken again
			}
		case kindAbort:
			if txid, _, err := decodeTx(b, kindAbort); err == nil {
				delete(pending, txid)
			}
		default:
			lost++
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	regions, lostBytes := r.Damaged()

	// Put transactions without a commit: at the tail of the log they were
	// never acknowledged (the crash came first) and are aborted; followed by
	// damage their commit may be what was lost, so they are kept.
	var txs []*pendingTx
	for _, p := range pending {
		txs = append(txs, p)
	}
	sort.Slice(txs, func(i, j int) bool { return txs[i].entries[0].pos.Less(txs[j].entries[0].pos) })
	var aborts [][]byte
	for _, p := range txs {
		if regions > p.damage {
			for _, e := range p.entries {
				add(e)
			}
			continue
		}
		for _, e := range p.entries {
			if e.ev != nil {
				st.cached -= int64(e.size)
			}
		}
		aborts = append(aborts, appendAbort(nil, p.txid))
	}
	if len(aborts) > 0 {
		if _, err := w.Append(aborts...); err != nil {
			return nil, fmt.Errorf("record aborted transactions: %w", err)
		}
	}

	for _, e := range items {
		if e.pos.Segment == 0 {
			continue
		}
		st.queue.pushBack(e)
		st.live[e.pos.Segment]++
	}
	if ws := w.Stats(); lost > 0 || ws.LostRegions > 0 {
		c.lostEvents.Add(lost)
		c.log.Warn("file channel: recovered from damage", "channel", c.name, "events_lost", lost,
			"damaged_regions", ws.LostRegions, "bytes_lost", ws.LostBytes, "replay_damaged_regions", regions, "replay_bytes_lost", lostBytes,
			"note", "events lost inside damaged regions whose commit record was lost too cannot be counted")
	}
	if len(aborts) > 0 {
		c.log.Info("file channel: dropped unacknowledged transactions torn by a crash", "channel", c.name, "transactions", len(aborts))
	}
	st.took = time.Since(start)
	return st, nil
}
