package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/sluicehq/sluice/internal/wal"
)

// replayState is what Start rebuilds from the checkpoint and the logs.
type replayState struct {
	queue          deque
	cached         int64
	live           []map[uint64]int
	nextTx         uint64
	records        int
	fromCheckpoint bool
	took           time.Duration
}

// pendingTx is a put transaction seen in a log without its commit yet.
type pendingTx struct {
	txid    uint64
	entries []entry
	damage  int // the reader's damaged-region count when its first put was read
}

// committedTx is a put transaction replayed from one dir's log.
type committedTx struct {
	txid    uint64
	entries []entry
}

// dirReplay is what one data dir's log says after the checkpoint.
type dirReplay struct {
	txs   []committedTx // committed put transactions, in log order
	kept  []committedTx // transactions whose commit record may have been lost to damage
	taken map[wal.Position]struct{}
}

// loadCheckpoint reads the main checkpoint, else the backup one. A missing
// or damaged checkpoint is logged, not an error: the caller replays every
// log in full instead.
func (c *Channel) loadCheckpoint() (nextTx uint64, dirs []ckDir, held []ckEntry, ok bool) {
	for _, dir := range []string{c.ckDir, c.backupDir} {
		if dir == "" {
			continue
		}
		ck, err := wal.ReadCheckpoint(dir)
		if err == nil {
			nextTx, dirs, held, err = decodeCheckpoint(ck.Payload)
			if err == nil {
				return nextTx, dirs, held, true
			}
		}
		if errors.Is(err, wal.ErrNoCheckpoint) {
			c.log.Info("file channel: no checkpoint", "channel", c.name, "dir", dir)
		} else {
			c.log.Warn("file channel: checkpoint unusable, replaying the logs in full", "channel", c.name, "dir", dir, "err", err)
		}
	}
	return 0, nil, nil, false
}

// replay rebuilds the channel's queue: the checkpoint's events, then the
// put transactions each log holds after the checkpoint's position for it,
// merged across logs by transaction number, less every event a take record
// says was taken. See records.go for the records and docs/format/wal.md
// for how damage is skipped.
func (c *Channel) replay(logs []*wal.Log) (*replayState, error) {
	start := time.Now()
	st := &replayState{nextTx: uint64(time.Now().UnixNano())}
	var lost int64
	from := make([]wal.Position, len(logs)) // zero: the whole log
	var items []entry                       // in queue order
	// Where each log started writing at this Open: no record of the
	// checkpoint can be at or after it (if one is, the dir's files were
	// lost or replaced, and the new records there are not that event).
	opened := make([]wal.Position, len(logs))
	for i, w := range logs {
		opened[i] = w.End()
	}
	nextTx, ckDirs, held, ok := c.loadCheckpoint()
	if ok {
		st.fromCheckpoint = true
		st.nextTx = max(st.nextTx, nextTx)
		dirOf := make([]int, len(ckDirs)) // checkpoint dir -> index in dataDirs, or -1
		known := make([]bool, len(logs))
		for ci, d := range ckDirs {
			dirOf[ci] = -1
			for i, p := range c.dataDirs {
				if p == d.path {
					dirOf[ci], from[i], known[i] = i, d.from, true
				}
			}
		}
		orphans := make([]int, len(ckDirs))
		items = make([]entry, 0, len(held))
		for _, h := range held {
			i := dirOf[h.dir]
			switch {
			case i < 0:
				orphans[h.dir]++
			case h.pos.Segment < logs[i].FirstSegment() || !h.pos.Less(opened[i]):
				lost++ // its segment is gone
			default:
				items = append(items, entry{pos: h.pos, dir: int32(i)})
			}
		}
		for ci, n := range orphans {
			if n > 0 {
				lost += int64(n)
				c.log.Error("file channel: a data dir that held events is no longer in dataDirs; its events are not read",
					"channel", c.name, "dir", ckDirs[ci].path, "events", n)
			}
		}
		for i, k := range known {
			if k && opened[i].Less(from[i]) {
				c.log.Error("file channel: data dir holds less than the checkpoint says: its files were lost or replaced",
					"channel", c.name, "dir", c.dataDirs[i], "checkpoint_position", from[i].String(), "log_end", opened[i].String())
			}
			if !k {
				c.log.Info("file channel: data dir not in the checkpoint, replaying its log in full", "channel", c.name, "dir", c.dataDirs[i])
			}
		}
	}

	drs := make([]*dirReplay, len(logs))
	for i, w := range logs {
		dr, err := c.replayDir(w, i, from[i], st, &lost)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.dataDirs[i], err)
		}
		drs[i] = dr
	}

	// Merge the logs' transactions: each log's own order is kept, and
	// between logs the lower transaction number goes first, which keeps the
	// order of transactions that did not overlap in time.
	heads := make([]int, len(drs))
	for {
		best := -1
		for i, dr := range drs {
			if heads[i] < len(dr.txs) && (best < 0 || dr.txs[heads[i]].txid < drs[best].txs[heads[best]].txid) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		items = append(items, drs[best].txs[heads[best]].entries...)
		heads[best]++
	}
	var kept []committedTx
	for _, dr := range drs {
		kept = append(kept, dr.kept...)
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].txid < kept[j].txid })
	for _, tx := range kept {
		items = append(items, tx.entries...)
	}

	st.live = make([]map[uint64]int, len(logs))
	for i := range st.live {
		st.live[i] = make(map[uint64]int)
	}
	st.cached = 0
	for _, e := range items {
		if _, ok := drs[e.dir].taken[e.pos]; ok {
			continue
		}
		if e.ev != nil {
			st.cached += int64(e.size)
		}
		st.queue.pushBack(e)
		st.live[e.dir][e.pos.Segment]++
	}

	var ws wal.Stats
	for _, w := range logs {
		s := w.Stats()
		ws.LostRegions += s.LostRegions
		ws.LostBytes += s.LostBytes
	}
	if lost > 0 || ws.LostRegions > 0 {
		c.lostEvents.Add(lost)
		c.log.Warn("file channel: recovered from damage", "channel", c.name, "events_lost", lost,
			"damaged_regions", ws.LostRegions, "bytes_lost", ws.LostBytes,
			"note", "events lost inside damaged regions whose commit record was lost too cannot be counted")
	}
	st.took = time.Since(start)
	return st, nil
}

// replayDir reads data dir i's log from a position. Put transactions
// without a commit at the tail of the log were never acknowledged (the
// crash came first) and are aborted, with an abort record so later replays
// agree; followed by damage their commit may be what was lost, so they are
// kept.
func (c *Channel) replayDir(w *wal.Log, dir int, from wal.Position, st *replayState, lost *int64) (*dirReplay, error) {
	dr := &dirReplay{taken: make(map[wal.Position]struct{})}
	pending := make(map[uint64]*pendingTx)
	r := w.NewReader(from)
	defer r.Close()
	for r.Next() {
		b, pos := r.Record(), r.Position()
		st.records++
		if len(b) == 0 {
			*lost++
			continue
		}
		switch b[0] {
		case kindPut:
			if len(b) < putFixed {
				*lost++
				continue
			}
			txid := binary.LittleEndian.Uint64(b[1:9])
			st.nextTx = max(st.nextTx, txid)
			e := entry{pos: pos, size: int32(len(b)), dir: int32(dir)}
			if st.cached+int64(e.size) <= c.cacheBudget {
				// Decode only what the memory budget will hold.
				_, ev, err := decodePut(b)
				if err != nil {
					*lost++
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
				*lost++ // a damaged commit; its puts are kept below
				continue
			}
			p := pending[txid]
			delete(pending, txid)
			got := 0
			if p != nil {
				got = len(p.entries)
				dr.txs = append(dr.txs, committedTx{txid: txid, entries: p.entries})
			}
			if n > got {
				*lost += int64(n - got) // puts lost in a damaged region
			}
		case kindTake:
			if _, err := decodePositions(b[1:], func(p wal.Position) { dr.taken[p] = struct{}{} }); err != nil {
				*lost++ // a damaged take: its events may be taken again
			}
		case kindAbort:
			if txid, _, err := decodeTx(b, kindAbort); err == nil {
				delete(pending, txid)
			}
		default:
			*lost++
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	regions, _ := r.Damaged()

	var txs []*pendingTx
	for _, p := range pending {
		txs = append(txs, p)
	}
	sort.Slice(txs, func(i, j int) bool { return txs[i].entries[0].pos.Less(txs[j].entries[0].pos) })
	var aborts [][]byte
	for _, p := range txs {
		if regions > p.damage {
			dr.kept = append(dr.kept, committedTx{txid: p.txid, entries: p.entries})
			continue
		}
		aborts = append(aborts, appendAbort(nil, p.txid))
	}
	if len(aborts) > 0 {
		if _, err := w.Append(aborts...); err != nil {
			return nil, fmt.Errorf("record aborted transactions: %w", err)
		}
		c.log.Info("file channel: dropped unacknowledged transactions torn by a crash", "channel", c.name,
			"dir", c.dataDirs[dir], "transactions", len(aborts))
	}
	return dr, nil
}
