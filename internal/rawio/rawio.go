// Package rawio reads and writes the agent's non-blocking sockets with raw
// system calls, so that a few hundred events a second do not cost a
// thousand wake-ups.
//
// Go's own socket Read and Write enter every system call through the
// scheduler (entersyscall), because a system call may block. The first one
// after the process was idle wakes the runtime's monitor thread (sysmon),
// which then polls every 20 µs until every processor is idle again: at 200
// events a second that is about five thread wake-ups per event, more than
// the event's own work, on a VM whose idle CPUs halt at once. A read or
// write of a non-blocking socket never blocks, so it needs none of that:
// here it is a raw system call, and waiting for readiness is still the
// netpoller's (syscall.RawConn), deadlines included. Blocking system calls
// (fdatasync) keep going through the scheduler.
package rawio

import (
	"io"
	"sync"
	"syscall"
)

// useRaw is false in -race builds: the race detector counts each socket
// read and write as synchronisation (the standard library's system call
// wrappers tell it so), which raw calls would not, and tests that rely on
// it would report races that are not there. Tests of this package set it.
var useRaw = Supported && !raceEnabled

// Enabled reports whether sockets are read and written with raw calls
// here (Linux, not a -race build).
func Enabled() bool { return useRaw }

// Conn is a socket whose raw file descriptor can be reached.
type Conn interface {
	SyscallConn() (syscall.RawConn, error)
}

// Reader reads a socket with raw system calls. Like a net.Conn it may be
// used from several goroutines, though reads then take turns.
type Reader struct {
	mu  sync.Mutex
	rc  syscall.RawConn
	buf []byte
	n   int
	err syscall.Errno
	fn  func(fd uintptr) bool
}

// NewReader returns a Reader of c, or nil when c has no raw descriptor
// (the caller then reads c as usual).
func NewReader(c any) *Reader {
	sc, ok := c.(Conn)
	if !useRaw {
		return nil
	}
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &Reader{rc: rc}
	r.fn = func(fd uintptr) bool {
		for {
			r.n, r.err = rawRead(fd, r.buf)
			switch r.err {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait for the netpoller to say it is readable
			}
			return true
		}
	}
	return r
}

// Read reads into p as net.Conn's Read does: at least one byte, or an
// error (io.EOF when the peer closed; the deadline's error after
// SetReadDeadline).
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = p
	err := r.rc.Read(r.fn)
	r.buf = nil
	if err != nil {
		return 0, err
	}
	if r.err != 0 {
		return 0, r.err
	}
	if r.n == 0 {
		return 0, io.EOF
	}
	return r.n, nil
}

// Writer writes a socket with raw system calls; writes from several
// goroutines take turns.
type Writer struct {
	mu  sync.Mutex
	rc  syscall.RawConn
	buf []byte
	n   int
	err syscall.Errno
	fn  func(fd uintptr) bool
}

// NewWriter returns a Writer of c, or nil when c has no raw descriptor.
func NewWriter(c any) *Writer {
	sc, ok := c.(Conn)
	if !useRaw {
		return nil
	}
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &Writer{rc: rc}
	w.fn = func(fd uintptr) bool {
		for w.n < len(w.buf) {
			k, errno := rawWrite(fd, w.buf[w.n:])
			switch errno {
			case 0:
				w.n += k
				continue
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until the socket can take more
			}
			w.err = errno
			return true
		}
		return true
	}
	return w
}

// Write writes all of p, as net.Conn's Write does (the write deadline
// applies).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf, w.n, w.err = p, 0, 0
	err := w.rc.Write(w.fn)
	n := w.n
	w.buf = nil
	if err != nil {
		return n, err
	}
	if w.err != 0 {
		return n, w.err
	}
	return n, nil
}

// Recv reads what fd holds without waiting (recv(2) with MSG_DONTWAIT),
// for a probe inside syscall.RawConn's Read or Control: n bytes, 0 and no
// error at the end of the stream, EAGAIN when there is nothing.
func Recv(fd uintptr, p []byte) (int, error) {
	n, errno := rawRecv(fd, p)
	if errno != 0 {
		return 0, errno
	}
	return n, nil
}

// ReadNow reads what the socket behind rc holds, without waiting: n bytes;
// 0 and no error when nothing is there yet (or this system cannot read
// without waiting); 0 and io.EOF at the end of the stream. A source uses it
// to top up a batch with input that has already arrived (flow.Batching).
// It is a raw call where Enabled, an ordinary one in -race builds.
func ReadNow(rc syscall.RawConn, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		for {
			n, errno = readNow(fd, p)
			if errno != syscall.EINTR {
				return true // never wait for readiness
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN || errno == syscall.ENOSYS:
		return 0, nil
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
