package flow

import "time"

// SetTakeWait shortens how long Process waits on an empty channel, for tests.
func (s *BatchSink) SetTakeWait(d time.Duration) { s.wait = d }

// SetClock replaces the clock of a failover or load_balance processor.
func SetClock(s Sink, now func() time.Time) {
	switch g := s.(type) {
	case *failover:
		g.now = now
	case *loadBalance:
		g.now = now
	}
}
