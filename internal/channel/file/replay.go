package filechannel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
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
	owed           [][][]byte // per dir: abort records a log that failed at Open could not take
}

// pendingTx is a put transaction seen in a log without its commit yet.
type pendingTx struct {
	txid    uint64
	entries []entry
	damage  int          // the reader's damaged-region count when its first put was read
	end     wal.Position // just past its last put record
}

// committedTx is a put transaction replayed from one dir's log.
type committedTx struct {
	txid    uint64
	entries []entry
	at      wal.Position // its commit record (for a kept one: where it was)
}

// dirReplay is what one data dir's log says after the checkpoint.
type dirReplay struct {
	// txs are the committed put transactions in commit order, including
	// those whose commit record was lost to damage, at the place it was.
	txs   []committedTx
	taken map[wal.Position]struct{}
}

// Sizes of the file channel's records in the log, for telling what a
// damaged region can have held (records.go).
var (
	commitFrame   = wal.FrameSize(13)           // a commit record
	minPutFrame   = wal.FrameSize(putFixed + 1) // the smallest put record: no header, empty body
	minEventBytes = minPutFrame                 // a region smaller than this held no event
)

// recovery gathers what one replay found, so that Start says it in one
// line: what, where, how many.
type recovery struct {
	lost      int64    // acknowledged events that cannot be given back
	uncounted int64    // damaged bytes that may have held whole transactions nobody can count
	unknown   bool     // a missing segment of unknown size, in the replayed part
	unacked   int      // events of transactions torn by a crash: never acknowledged, dropped
	kept      int      // events of transactions whose commit record was damaged: given back
	damaged   bool     // anything beyond what a crash leaves
	places    []string // each finding, with its dir and file
}

func (r *recovery) add(damage bool, format string, args ...any) {
	r.places = append(r.places, fmt.Sprintf(format, args...))
	r.damaged = r.damaged || damage
}

// log writes the one line about this recovery, if there is anything to
// say: ERROR when acknowledged events are (or may be) lost, WARN for
// damage that lost none, INFO for what a crash leaves.
func (r *recovery) log(l *slog.Logger, name string) {
	if len(r.places) == 0 {
		return
	}
	level, msg := slog.LevelInfo, "file channel: recovered after a crash; nothing acknowledged was lost"
	switch {
	case r.lost > 0:
		level, msg = slog.LevelError, "file channel: recovery lost acknowledged events (counted in RecoveryLostEventCount)"
	case r.uncounted > 0 || r.unknown:
		level, msg = slog.LevelError, "file channel: recovered from damage; acknowledged events may have been lost that cannot be counted"
	case r.damaged:
		level, msg = slog.LevelWarn, "file channel: recovered from damage; no acknowledged event was lost"
	}
	args := []any{"channel", name, "events_lost", r.lost}
	if r.uncounted > 0 || r.unknown {
		u := fmt.Sprint(r.uncounted)
		if r.unknown {
			u += "+ (a missing segment of unknown size)"
		}
		args = append(args, "uncounted_damaged_bytes", u)
	}
	if r.kept > 0 {
		args = append(args, "events_kept_without_commit_record", r.kept)
	}
	if r.unacked > 0 {
		args = append(args, "unacknowledged_events_dropped", r.unacked)
	}
	args = append(args, "found", strings.Join(r.places, "; "))
	l.Log(context.Background(), level, msg, args...)
}

// loadCheckpoint reads the main checkpoint, else the backup one. A missing
// or damaged checkpoint is not an error: the caller replays every log in
// full instead. why says what was wrong with the ones not used.
func (c *Channel) loadCheckpoint() (nextTx uint64, dirs []ckDir, held []ckEntry, ok bool, why []string) {
	for _, dir := range []string{c.ckDir, c.backupDir} {
		if dir == "" {
			continue
		}
		ck, err := wal.ReadCheckpoint(dir)
		if err == nil {
			nextTx, dirs, held, err = decodeCheckpoint(ck.Payload)
			if err == nil {
				return nextTx, dirs, held, true, why
			}
		}
		path := dir + "/" + wal.CheckpointFile
		if errors.Is(err, wal.ErrNoCheckpoint) {
			why = append(why, "checkpoint "+path+" missing")
		} else {
			why = append(why, fmt.Sprintf("checkpoint %s unusable (%v)", path, err))
		}
	}
	return 0, nil, nil, false, why
}

// replay rebuilds the channel's queue: the checkpoint's events, then the
// put transactions each log holds after the checkpoint's position for it,
// merged across logs by transaction number, less every event a take record
// says was taken. See records.go for the records and docs/format/wal.md
// for how damage is skipped. What it could not give back it counts, and
// says in one line.
func (c *Channel) replay(logs []*wal.Log) (*replayState, error) {
	start := time.Now()
	st := &replayState{nextTx: uint64(time.Now().UnixNano()), owed: make([][][]byte, len(logs))}
	rep := &recovery{}
	from := make([]wal.Position, len(logs)) // zero: the whole log
	var items []entry                       // in queue order
	// Where each log started writing at this Open: no record of the
	// checkpoint can be at or after it (if one is, the dir's files were
	// lost or replaced, and the new records there are not that event).
	opened := make([]wal.Position, len(logs))
	segs := make([]map[uint64]wal.SegmentInfo, len(logs))
	for i, w := range logs {
		opened[i] = w.End()
		list, err := w.Segments()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.dataDirs[i], err)
		}
		segs[i] = make(map[uint64]wal.SegmentInfo, len(list))
		for _, si := range list {
			segs[i][si.Seq] = si
		}
		for _, d := range w.OpenDamage() {
			switch d.Kind {
			case wal.TornTail:
				rep.add(false, "data dir %s: %s cut off (a crash during a write)", c.dataDirs[i], d)
			case wal.ShortSegment:
				rep.add(false, "data dir %s: %s removed (a crash while creating it)", c.dataDirs[i], d)
			}
		}
	}
	nextTx, ckDirs, held, ok, why := c.loadCheckpoint()
	if ok {
		st.fromCheckpoint = true
		st.nextTx = max(st.nextTx, nextTx)
		if len(why) > 0 {
			rep.add(true, "%s; used the backup checkpoint", strings.Join(why, "; "))
		}
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
		items = c.checkHeld(logs, segs, opened, from, ckDirs, dirOf, held, rep)
		for i, k := range known {
			if !k {
				c.log.Info("file channel: data dir not in the checkpoint, replaying its log in full", "channel", c.name, "dir", c.dataDirs[i])
			}
		}
	}

	drs := make([]*dirReplay, len(logs))
	for i, w := range logs {
		dr, err := c.replayDir(w, i, from[i], st, rep)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.dataDirs[i], err)
		}
		drs[i] = dr
	}
	if !ok && (st.records > 0 || rep.damaged) {
		rep.add(true, "%s; replayed every log in full (exact, but slower)", strings.Join(why, "; "))
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
	c.lostEvents.Add(rep.lost)
	rep.log(c.log, c.name)
	st.took = time.Since(start)
	return st, nil
}

// checkHeld turns the checkpoint's held events into queue entries, less
// those it can tell are gone: in a data dir no longer configured, in a
// segment missing or cut short, at or past where the dir's log now ends.
// Each loss is counted and told per segment, never per event.
func (c *Channel) checkHeld(logs []*wal.Log, segs []map[uint64]wal.SegmentInfo, opened, from []wal.Position,
	ckDirs []ckDir, dirOf []int, held []ckEntry, rep *recovery) []entry {
	missing := map[segKey]int{}
	cut := map[segKey]int{}
	replaced := make([]int, len(logs))
	orphans := make([]int, len(ckDirs))
	items := make([]entry, 0, len(held))
	for _, h := range held {
		i := dirOf[h.dir]
		if i < 0 {
			orphans[h.dir]++
			continue
		}
		if !h.pos.Less(opened[i]) {
			replaced[i]++
			continue
		}
		si, present := segs[i][h.pos.Segment]
		if !present {
			missing[segKey{i, h.pos.Segment}]++
			continue
		}
		limit := segLimit(si)
		end := h.pos.Offset + wal.FrameHeaderSize
		if end <= limit && si.Written > si.Size {
			// In a segment cut short: the record must end before the cut.
			if e, err := logs[i].RecordEnd(h.pos); err != nil || e > limit {
				end = limit + 1
			}
		}
		if end > limit {
			cut[segKey{i, h.pos.Segment}]++
			continue
		}
		items = append(items, entry{pos: h.pos, dir: int32(i)})
	}
	for ci, n := range orphans {
		if n > 0 {
			rep.lost += int64(n)
			rep.add(true, "data dir %s is no longer in dataDirs: its %d events were left there, not read", ckDirs[ci].path, n)
		}
	}
	for i, n := range replaced {
		if n > 0 {
			rep.lost += int64(n)
			rep.add(true, "data dir %s holds less than the checkpoint says (its log ends at %s, the checkpoint resumes at %s: "+
				"its files were lost or replaced): %d held events lost", c.dataDirs[i], opened[i], from[i], n)
		}
	}
	for _, k := range sortedSegKeys(missing) {
		n := missing[k]
		rep.lost += int64(n)
		rep.add(true, "data dir %s: segment %s missing: %d held events lost", c.dataDirs[k.dir], segFile(k.seg), n)
	}
	for _, k := range sortedSegKeys(cut) {
		n := cut[k]
		si := segs[k.dir][k.seg]
		rep.lost += int64(n)
		rep.add(true, "data dir %s: segment %s cut short to %d bytes (it had %s): %d held events lost",
			c.dataDirs[k.dir], segFile(k.seg), si.Size, writtenText(si), n)
	}
	// Damage before the replay starts that cost no held event is told too.
	for i := range logs {
		first := logs[i].FirstSegment()
		for s := first; s < from[i].Segment; s++ {
			si, present := segs[i][s]
			switch {
			case !present && missing[segKey{i, s}] == 0:
				rep.add(true, "data dir %s: segment %s missing (it held no event still in the channel)", c.dataDirs[i], segFile(s))
			case present && si.Written > si.Size && cut[segKey{i, s}] == 0:
				rep.add(true, "data dir %s: segment %s cut short to %d bytes (it had %d; none of its events was still in the channel)",
					c.dataDirs[i], segFile(s), si.Size, si.Written)
			}
		}
	}
	return items
}

// segLimit is how many bytes of a segment can hold records: its size, or
// what the next segment's header says it was written to, if that is less.
func segLimit(si wal.SegmentInfo) int64 {
	if si.Written > 0 && si.Written < si.Size {
		return si.Written
	}
	return si.Size
}

func writtenText(si wal.SegmentInfo) string {
	if si.Written > 0 {
		return fmt.Sprint(si.Written)
	}
	return "more"
}

func segFile(n uint64) string { return fmt.Sprintf("%08d.wal", n) }

// segKey names a segment of a data dir.
type segKey struct {
	dir int
	seg uint64
}

// sortedSegKeys orders m's keys for a stable report.
func sortedSegKeys(m map[segKey]int) []segKey {
	out := make([]segKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].dir != out[j].dir {
			return out[i].dir < out[j].dir
		}
		return out[i].seg < out[j].seg
	})
	return out
}

// replayDir reads data dir i's log from a position. Put transactions
// without a commit at the tail of the log were never acknowledged (the
// crash came first) and are aborted, with an abort record so later replays
// agree; followed by damage their commit may be what was lost, so they are
// kept.
func (c *Channel) replayDir(w *wal.Log, dir int, from wal.Position, st *replayState, rep *recovery) (*dirReplay, error) {
	dr := &dirReplay{taken: make(map[wal.Position]struct{})}
	pending := make(map[uint64]*pendingTx)
	var shortTx, shortEvents int // committed transactions missing puts, and how many
	var bad int                  // records that passed their checksum but do not decode
	r := w.NewReader(from)
	defer r.Close()
	for r.Next() {
		b, pos := r.Record(), r.Position()
		st.records++
		if len(b) == 0 {
			bad++
			continue
		}
		switch b[0] {
		case kindPut:
			if len(b) < putFixed {
				bad++
				continue
			}
			txid := binary.LittleEndian.Uint64(b[1:9])
			st.nextTx = max(st.nextTx, txid)
			e := entry{pos: pos, size: int32(len(b)), dir: int32(dir)}
			if st.cached+int64(e.size) <= c.cacheBudget {
				// Decode only what the memory budget will hold.
				_, ev, err := decodePut(b)
				if err != nil {
					bad++
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
			p.end = wal.Position{Segment: pos.Segment, Offset: pos.Offset + wal.FrameSize(len(b))}
		case kindCommit:
			txid, n, err := decodeTx(b, kindCommit)
			if err != nil {
				bad++ // its puts are kept below, as for a commit lost to damage
				continue
			}
			p := pending[txid]
			delete(pending, txid)
			got := 0
			if p != nil {
				got = len(p.entries)
				dr.txs = append(dr.txs, committedTx{txid: txid, entries: p.entries, at: pos})
			}
			if n > got {
				shortTx++
				shortEvents += n - got // puts lost in a damaged region
			}
		case kindTake:
			if _, err := decodePositions(b[1:], func(p wal.Position) { dr.taken[p] = struct{}{} }); err != nil {
				bad++ // a damaged take: its events may be taken again
			}
		case kindAbort:
			if txid, _, err := decodeTx(b, kindAbort); err == nil {
				delete(pending, txid)
			}
		default:
			bad++
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	regions, _ := r.Damaged()
	name := c.dataDirs[dir]
	rep.lost += int64(shortEvents + bad)
	if shortEvents > 0 {
		rep.add(true, "data dir %s: %d transactions lost %d of their events to damage", name, shortTx, shortEvents)
	}
	if bad > 0 {
		rep.add(true, "data dir %s: %d records unreadable (counted as one event each)", name, bad)
	}

	var txs []*pendingTx
	for _, p := range pending {
		txs = append(txs, p)
	}
	sort.Slice(txs, func(i, j int) bool { return txs[i].entries[0].pos.Less(txs[j].entries[0].pos) })
	var aborts [][]byte
	commitAt := map[wal.Position]int{} // damage that began where a kept transaction's commit was
	keptTx, keptEvents, unackedTx, unacked := 0, 0, 0, 0
	for _, p := range txs {
		if regions > p.damage {
			dr.txs = append(dr.txs, committedTx{txid: p.txid, entries: p.entries, at: p.end})
			commitAt[p.end]++
			keptTx++
			keptEvents += len(p.entries)
			continue
		}
		aborts = append(aborts, appendAbort(nil, p.txid))
		unackedTx++
		unacked += len(p.entries)
	}
	if keptTx > 0 {
		// In commit order, where their commit record was.
		sort.SliceStable(dr.txs, func(i, j int) bool { return dr.txs[i].at.Less(dr.txs[j].at) })
		rep.kept += keptEvents
		rep.add(true, "data dir %s: %d transactions (%d events) whose commit record was damaged: given back, "+
			"their puts are intact", name, keptTx, keptEvents)
	}
	if unackedTx > 0 {
		rep.unacked += unacked
		rep.add(false, "data dir %s: %d transactions torn by a crash before their commit record was written "+
			"(%d of their events read): never acknowledged, dropped", name, unackedTx, unacked)
	}
	c.reportReadDamage(name, r.Damage(), commitAt, rep)
	if len(aborts) > 0 {
		if _, err := w.Append(aborts...); err != nil {
			// A log that opened failed (its disk full): written with the
			// take records it will owe, once it works again.
			st.owed[dir] = append(st.owed[dir], aborts...)
		}
	}
	return dr, nil
}

// reportReadDamage tells the damage the replay read through, and how many
// bytes of it may have held whole transactions that cannot be counted: a
// region that began where a kept transaction's commit record was held that
// record; what is left of it, if at least one put record could fit, may
// have held more.
func (c *Channel) reportReadDamage(name string, damage []wal.Damage, commitAt map[wal.Position]int, rep *recovery) {
	for _, d := range damage {
		var rest int64
		switch d.Kind {
		case wal.BadHeader:
			rep.add(true, "data dir %s: %s (its records were read anyway)", name, d)
			continue
		case wal.Missing:
			if d.Bytes < 0 {
				rep.unknown = true
				rep.add(true, "data dir %s: %s, after the checkpoint: the events it held cannot be counted", name, d)
				continue
			}
			rest = d.Bytes - wal.SegmentHeaderSize
		case wal.Region:
			if d.OneRecord {
				// One record: a put (its commit, further on, counted
				// it), a commit (its transaction is kept), or a take.
				rep.add(true, "data dir %s: %s: one record", name, d)
				continue
			}
			fallthrough
		default:
			rest = d.Bytes - int64(commitAt[wal.Position{Segment: d.Segment, Offset: d.Offset}])*commitFrame
		}
		if rest >= minEventBytes {
			rep.uncounted += rest
			rep.add(true, "data dir %s: %s, after the checkpoint: events in it whose commit record was in it too "+
				"cannot be counted", name, d)
		} else {
			rep.add(true, "data dir %s: %s (no event was lost in it)", name, d)
		}
	}
}
