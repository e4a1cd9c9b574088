package sinktest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"sync"
	"testing"
)

// Downstream is a sink's downstream as the suite sees and steers it. Every
// field may be nil: the suite skips what needs a missing one, with Note.
type Downstream struct {
	// Delivered returns the bodies the downstream has taken so far, in
	// arrival order, duplicates included.
	Delivered func() []string
	// Refuse makes the downstream refuse every delivery from now on, the way
	// the real one does (an RPC server answering FAILED, an HTTP 503 or 429,
	// a broker's produce error, a directory that cannot hold files, a
	// listener gone), until Accept.
	Refuse func()
	// Stall makes the downstream hold every delivery without an answer
	// until Accept, so that a write is in progress for as long as the test
	// wants.
	Stall func()
	// Accept ends Refuse and Stall: deliveries are taken again.
	Accept func()
	// Note says why a nil Refuse or Stall cannot be had (a sink that
	// discards events, a local file written at once).
	Note string
}

// Gate steers a test downstream that asks it about each delivery: a
// request handler, an RPC handler or a broker's control function calls
// Admit, and refuses, holds or takes the delivery as the suite set it.
type Gate struct {
	mu      sync.Mutex
	mode    gateMode
	changed chan struct{} // closed at each change of mode
}

type gateMode int

const (
	gateAccept gateMode = iota
	gateRefuse
	gateStall
)

// NewGate returns a gate that accepts.
func NewGate() *Gate { return &Gate{changed: make(chan struct{})} }

func (g *Gate) set(m gateMode) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = m
	close(g.changed)
	g.changed = make(chan struct{})
}

// Refuse makes Admit return false.
func (g *Gate) Refuse() { g.set(gateRefuse) }

// Stall makes Admit wait.
func (g *Gate) Stall() { g.set(gateStall) }

// Accept makes Admit return true, also to the calls that wait.
func (g *Gate) Accept() { g.set(gateAccept) }

// Admit reports whether the downstream takes a delivery now. While the gate
// stalls it waits until the gate changes or ctx ends (then false).
func (g *Gate) Admit(ctx context.Context) bool {
	for {
		g.mu.Lock()
		m, changed := g.mode, g.changed
		g.mu.Unlock()
		switch m {
		case gateAccept:
			return true
		case gateRefuse:
			return false
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// Downstream is the suite's view of a downstream behind g, whose taken
// bodies delivered returns.
func (g *Gate) Downstream(delivered func() []string) Downstream {
	return Downstream{Delivered: delivered, Refuse: g.Refuse, Stall: g.Stall, Accept: g.Accept}
}

// Bodies records delivered bodies for a test downstream; safe for
// concurrent use.
type Bodies struct {
	mu     sync.Mutex
	bodies []string
}

// Add records bodies, in order.
func (b *Bodies) Add(bodies ...string) {
	b.mu.Lock()
	b.bodies = append(b.bodies, bodies...)
	b.mu.Unlock()
}

// Get returns a copy of what was recorded.
func (b *Bodies) Get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.bodies...)
}

// DirGone returns Refuse and Accept for a sink that writes files into dir.
// Refuse moves dir aside (if it exists yet) and puts a regular file in its
// place, so no file can be created there (ENOTDIR, which holds for root
// too, unlike a read-only mode); files the sink still has open keep taking
// writes in the moved directory, as on a real filesystem. Accept puts dir
// back.
func DirGone(t testing.TB, dir string) (refuse, accept func()) {
	aside := dir + ".aside"
	var mu sync.Mutex
	gone, moved := false, false
	refuse = func() {
		mu.Lock()
		defer mu.Unlock()
		if gone {
			return
		}
		err := os.Rename(dir, aside)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("move %s aside: %v", dir, err)
			return
		}
		moved = err == nil
		if err := os.WriteFile(dir, []byte("not a directory\n"), 0o644); err != nil {
			t.Errorf("put a file in place of %s: %v", dir, err)
		}
		gone = true
	}
	accept = func() {
		mu.Lock()
		defer mu.Unlock()
		if !gone {
			return
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove the file in place of %s: %v", dir, err)
		}
		if moved {
			if err := os.Rename(aside, dir); err != nil {
				t.Errorf("put %s back: %v", dir, err)
			}
		}
		gone = false
	}
	return refuse, accept
}
