package flow

import (
	"context"
	"sync"
	"time"
)

// SpaceSignal is how a channel's committers wait for the space that takes
// free: a committer that finds the channel full Waits under the channel's
// lock (released while it waits), and whatever frees space Broadcasts under
// the same lock. The zero value is ready; nothing is allocated until a
// committer waits.
type SpaceSignal struct {
	ch chan struct{} // closed by Broadcast; nil while nobody waits
}

// Wait releases mu, which must be held, and waits until Broadcast (then
// both results are false), until expire fires (expired) or until ctx ends
// (ended); it holds mu again when it returns. The caller checks for space
// again in every case: a Broadcast does not promise enough of it.
func (s *SpaceSignal) Wait(ctx context.Context, mu *sync.Mutex, expire <-chan time.Time) (expired, ended bool) {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	wait := s.ch
	mu.Unlock()
	defer mu.Lock()
	select {
	case <-wait:
	case <-expire:
		expired = true
	case <-ctx.Done():
		ended = true
	}
	return expired, ended
}

// Broadcast wakes every committer waiting. The lock the waiters gave Wait
// must be held.
func (s *SpaceSignal) Broadcast() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
