package filechannel

// deque is a growable ring of entries: the channel's queue, FIFO with
// rollbacks pushed back at the front.
type deque struct {
	buf  []entry
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) grow() {
	size := max(2*len(d.buf), 1024)
	buf := make([]entry, size)
	k := copy(buf, d.buf[d.head:])
	copy(buf[k:], d.buf[:d.head])
	d.buf, d.head = buf, 0
}

func (d *deque) pushBack(e entry) {
	if d.n == len(d.buf) {
		d.grow()
	}
	i := d.head + d.n
	if i >= len(d.buf) {
		i -= len(d.buf)
	}
	d.buf[i] = e
	d.n++
}

func (d *deque) pushFront(e entry) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head--
	if d.head < 0 {
		d.head += len(d.buf)
	}
	d.buf[d.head] = e
	d.n++
}

func (d *deque) popFront() entry {
	e := d.buf[d.head]
	d.buf[d.head] = entry{}
	d.head++
	if d.head == len(d.buf) {
		d.head = 0
	}
	d.n--
	return e
}

// each calls fn for every entry, front to back.
func (d *deque) each(fn func(*entry)) {
	for i := range d.n {
		j := d.head + i
		if j >= len(d.buf) {
			j -= len(d.buf)
		}
		fn(&d.buf[j])
	}
}
