package flow

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestSpaceSignal: a waiter ends by a Broadcast, by its timer or by its
// context, says which, and holds the lock again when it returns.
func TestSpaceSignal(t *testing.T) {
	for _, c := range []struct {
		name                   string
		broadcast, timer       bool
		cancel                 bool
		wantExpired, wantEnded bool
	}{
		{name: "broadcast", broadcast: true},
		{name: "timer", timer: true, wantExpired: true},
		{name: "ctx", cancel: true, wantEnded: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var s SpaceSignal
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			expire := make(chan time.Time, 1)
			mu.Lock()
			done := make(chan [2]bool)
			go func() {
				e, n := s.Wait(ctx, &mu, expire)
				mu.Unlock() // held again: unlocking an unlocked mutex would panic
				done <- [2]bool{e, n}
			}()
			// The waiter released the lock: take it, then end the wait.
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			switch {
			case c.broadcast:
				s.Broadcast()
			case c.timer:
				expire <- time.Now()
			case c.cancel:
				cancel()
			}
			mu.Unlock()
			select {
			case got := <-done:
				if got != [2]bool{c.wantExpired, c.wantEnded} {
					t.Fatalf("expired, ended = %v, want %v, %v", got, c.wantExpired, c.wantEnded)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter did not return")
			}
		})
	}
}
