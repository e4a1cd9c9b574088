package taildirsource

import (
	"bytes"
	"unicode/utf8"
)

// Headers of the pieces of a line longer than maxLineLength: the piece's
// number, from 1, and whether it is the line's last piece.
const (
	pieceHeader     = "linePiece"
	lastPieceHeader = "linePieceLast"
)

// chunk is one event's body in a read buffer: a whole line, or a piece of
// a line longer than maxLineLength.
type chunk struct {
	lo, hi int
	piece  int  // 0 for a whole line; else the piece's number, from 1
	last   bool // the last piece of a split line
}

// splitLines cuts data into at most max events. Each line is one event, its
// body without the '\n' and a '\r' before it (as in Flume); a line whose body
// is longer than limit bytes is cut into pieces of limit bytes (fewer where
// a cut would split a UTF-8 character), its last piece holding the rest.
// piece is how many pieces of the line at data[0] were already sent; the
// returned piece is the same for the line at data[consumed:]. Bytes after
// the last newline are cut as far as they are surely longer than limit,
// and with partial the rest is a last line too.
func splitLines(data []byte, max, limit, piece int, partial bool) (chunks []chunk, consumed, nextPiece int) {
	pos := 0
	for len(chunks) < max && pos < len(data) {
		// Looking limit+2 bytes ahead is enough: a longer line is cut anyway.
		window := data[pos:min(len(data), pos+limit+2)]
		var end int
		next := -1
		if i := bytes.IndexByte(window, '\n'); i >= 0 {
			end, next = pos+i, pos+i+1
			if end > pos && data[end-1] == '\r' {
				end--
			}
		} else {
			rest := len(data) - pos
			switch {
			case rest >= limit+2 || (rest == limit+1 && data[len(data)-1] != '\r'):
				end = len(data) // longer than limit whatever follows: cut below
			case partial:
				end, next = len(data), len(data)
			default:
				return chunks, pos, piece
			}
		}
		if end-pos > limit {
			cut := cutAt(data[pos:], limit)
			piece++
			chunks = append(chunks, chunk{lo: pos, hi: pos + cut, piece: piece})
			pos += cut
			continue
		}
		c := chunk{lo: pos, hi: end}
		if piece > 0 {
			c.piece, c.last = piece+1, true
		}
		chunks = append(chunks, c)
		piece, pos = 0, next
	}
	return chunks, pos, piece
}

// cutAt returns where to cut b, longer than limit, into a piece of at most
// limit bytes: at limit, or before a UTF-8 character that would straddle it.
func cutAt(b []byte, limit int) int {
	if utf8.RuneStart(b[limit]) {
		return limit
	}
	for k := limit - 1; k > 0 && k > limit-utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k]) {
			if r, size := utf8.DecodeRune(b[k:]); (r != utf8.RuneError || size > 1) && k+size > limit {
				return k
			}
			break
		}
	}
	return limit
}
