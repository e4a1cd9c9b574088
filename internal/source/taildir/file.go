package taildirsource

import (
	"hash/fnv"
	"os"
	"syscall"
	"time"
)

// sigLen is how many bytes before a file's position are summed to notice
// that the file was truncated and rewritten past the position: enough to
// span several lines, so lines that repeat do not fool it.
const sigLen = 1024

// fileKey identifies a file whatever its name.
type fileKey struct{ dev, ino uint64 }

// tailFile is the state of one followed file.
type tailFile struct {
	key   fileKey
	path  string // last name it was seen under
	dir   string // directory it was last seen in
	group *group
	f     *os.File // nil while closed (idle)

	pos        int64  // every line before pos is committed
	sig        sig    // the bytes just before pos
	tail       []byte // up to sigLen bytes just before pos, when known
	size       int64  // size at the last look
	lastGrowth time.Time
	seen       uint64 // scan generation it was last seen in
	gone       bool   // no longer under a matching name: read to the end, then dropped
	flush      bool   // idle: send a partial last line as it is
	piece      int    // pieces already sent of the line at pos, split for being too long (0 at a line's start)
	// spill is set on the source's own copy of the unread lines of a file
	// rotated away before a stop (see spill.go): path is the original's,
	// and base+pos is the offset in it.
	spill string
	base  int64

	cl   *recFile // container log records (format cri, docker, auto); nil for lines
	pod  *podMeta // what the path says of the pod, once asked
	link bool     // found through a symbolic link: its writes are not watched, it is polled
	next uint64   // of a spill file: the inode of the file that replaced the original
}

func keyOf(st os.FileInfo) fileKey {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return fileKey{dev: uint64(sys.Dev), ino: sys.Ino}
	}
	return fileKey{}
}

// sig sums the n bytes before a position.
type sig struct {
	n   int
	sum uint64
}

func sum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// matches reports whether the n bytes of f before pos still sum the same.
func (g sig) matches(f *os.File, pos int64) bool {
	if int64(g.n) > pos {
		return false
	}
	buf := make([]byte, g.n)
	n, _ := f.ReadAt(buf, pos-int64(g.n))
	return n == g.n && sum(buf) == g.sum
}
