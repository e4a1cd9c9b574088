package hdfssink

import (
	"bytes"
	"compress/bzip2"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	dsbzip2 "github.com/dsnet/compress/bzip2"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// codec is one of Hadoop's compression codecs, as the output stream that
// codec.createOutputStream gives Hadoop writes it. Each batch is compressed
// as one complete unit (a gzip member, a zlib or bzip2 stream, a zstd frame,
// or whole blocks of Hadoop's block framing), exactly as Flume's
// CompressedStream does by finishing the codec stream at every flush; every
// Hadoop decompressor reads such concatenations.
type codec struct {
	name  string // as sluice prints it
	class string // Hadoop's class, written into SequenceFile headers
	ext   string // Hadoop's default extension, added to file names without a suffix
	// compress appends the compressed unit of src to dst.
	compress func(dst, src []byte) ([]byte, error)
	// scan returns the length of the longest prefix of data made of
	// complete units, for recovery after a crash.
	scan func(data []byte) int
}

// codecs are the codecs sluice writes, by the names Flume's codecMatches
// accepts (the class's simple name, or it without "Codec", any case).
var codecs = []*codec{
	{name: "gzip", class: "org.apache.hadoop.io.compress.GzipCodec", ext: ".gz", compress: gzipUnit, scan: scanGzip},
	{name: "bzip2", class: "org.apache.hadoop.io.compress.BZip2Codec", ext: ".bz2", compress: bzip2Unit, scan: scanBzip2},
	{name: "deflate", class: "org.apache.hadoop.io.compress.DefaultCodec", ext: ".deflate", compress: zlibUnit, scan: scanZlib},
	{name: "snappy", class: "org.apache.hadoop.io.compress.SnappyCodec", ext: ".snappy", compress: snappyBlocks, scan: scanSnappy},
	{name: "lz4", class: "org.apache.hadoop.io.compress.Lz4Codec", ext: ".lz4", compress: lz4Blocks, scan: scanLz4},
	{name: "zstd", class: "org.apache.hadoop.io.compress.ZStandardCodec", ext: ".zst", compress: zstdUnit, scan: scanZstd},
}

// codecByName finds a codec as Flume does: by Hadoop class name, simple
// class name, or simple name without "Codec", case-insensitively; also
// "default" and "zstandard"/"zstd", and DeflateCodec (which Hadoop frames
// as DefaultCodec does).
func codecByName(name string) (*codec, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	n = strings.TrimPrefix(n, "org.apache.hadoop.io.compress.")
	n = strings.TrimSuffix(n, "codec")
	switch n {
	case "default", "deflate":
		n = "deflate"
	case "zstandard":
		n = "zstd"
	}
	for _, c := range codecs {
		if c.name == n {
			return c, nil
		}
	}
	switch n {
	case "lzo", "lzop":
		return nil, fmt.Errorf("codec %q (hadoop-lzo) is not supported by sluice; use gzip, bzip2, deflate, snappy, lz4 or zstd", name)
	}
	return nil, fmt.Errorf("unknown codec %q; use gzip, bzip2, deflate (Hadoop's DefaultCodec), snappy, lz4 or zstd", name)
}

func gzipUnit(dst, src []byte) ([]byte, error) {
	b := bytes.NewBuffer(dst)
	w := gzip.NewWriter(b)
	if _, err := w.Write(src); err != nil {
		return nil, err
	}
	err := w.Close()
	return b.Bytes(), err
}

func zlibUnit(dst, src []byte) ([]byte, error) {
	b := bytes.NewBuffer(dst)
	w := zlib.NewWriter(b)
	if _, err := w.Write(src); err != nil {
		return nil, err
	}
	err := w.Close()
	return b.Bytes(), err
}

func bzip2Unit(dst, src []byte) ([]byte, error) {
	b := bytes.NewBuffer(dst)
	w, err := dsbzip2.NewWriter(b, &dsbzip2.WriterConfig{Level: 9})
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(src); err != nil {
		return nil, err
	}
	err = w.Close()
	return b.Bytes(), err
}

var zstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))

func zstdUnit(dst, src []byte) ([]byte, error) {
	return zstdEnc.EncodeAll(src, dst), nil
}

// Hadoop's BlockCompressorStream (SnappyCodec, Lz4Codec) frames data as
// blocks: the block's uncompressed length (4 bytes, big endian), then one
// or more chunks of compressed length (4 bytes) and raw codec data whose
// uncompressed sizes add up to it. A block holds at most the codec's buffer
// size less its compression overhead (256 KiB buffers: 218422 bytes for
// snappy, 261100 for lz4); sluice writes one chunk per block.
const (
	snappyMaxInput = 256*1024 - (256*1024/6 + 32)
	lz4MaxInput    = 256*1024 - (256*1024/255 + 16)
)

func snappyBlocks(dst, src []byte) ([]byte, error) {
	return blocks(dst, src, snappyMaxInput, func(d, s []byte) ([]byte, error) {
		return s2.EncodeSnappy(d, s), nil
	}, s2.MaxEncodedLen)
}

func lz4Blocks(dst, src []byte) ([]byte, error) {
	var c lz4.Compressor
	return blocks(dst, src, lz4MaxInput, func(d, s []byte) ([]byte, error) {
		n, err := c.CompressBlock(s, d)
		if err != nil {
			return nil, err
		}
		if n == 0 && len(s) > 0 {
			return nil, errors.New("lz4: block did not compress")
		}
		return d[:n], nil
	}, lz4.CompressBlockBound)
}

func blocks(dst, src []byte, max int, enc func(d, s []byte) ([]byte, error), bound func(int) int) ([]byte, error) {
	for len(src) > 0 {
		n := min(len(src), max)
		start := len(dst)
		dst = binary.BigEndian.AppendUint32(dst, uint32(n))
		dst = binary.BigEndian.AppendUint32(dst, 0)
		need := bound(n)
		if cap(dst)-len(dst) < need {
			dst = append(dst, make([]byte, need)...)[:len(dst)]
		}
		out, err := enc(dst[len(dst):len(dst)+need], src[:n])
		if err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint32(dst[start+4:], uint32(len(out)))
		dst = dst[:len(dst)+len(out)]
		src = src[n:]
	}
	return dst, nil
}

// countingReader counts the bytes a decompressor consumed; it is an
// io.ByteReader so that flate reads exactly what it needs and no more.
type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// scanGzip returns the end of the last complete gzip member.
func scanGzip(data []byte) int {
	cr := &countingReader{r: bytes.NewReader(data)}
	good := 0
	zr, err := gzip.NewReader(cr)
	for err == nil {
		zr.Multistream(false)
		if _, err = io.Copy(io.Discard, zr); err != nil {
			break
		}
		good = cr.n
		err = zr.Reset(cr)
	}
	return good
}

// scanZlib returns the end of the last complete zlib stream.
func scanZlib(data []byte) int {
	good := 0
	for good < len(data) {
		cr := &countingReader{r: bytes.NewReader(data[good:])}
		zr, err := zlib.NewReader(cr)
		if err != nil {
			break
		}
		if _, err := io.Copy(io.Discard, zr); err != nil {
			break
		}
		good += cr.n
	}
	return good
}

// scanBzip2 returns the end of the last complete bzip2 stream. Streams are
// byte-aligned and start with "BZh" and a block or end-of-stream magic, so
// the data is cut at those signatures and each piece must decode whole.
func scanBzip2(data []byte) int {
	var starts []int
	for i := 0; i+10 <= len(data); i++ {
		if data[i] == 'B' && data[i+1] == 'Z' && data[i+2] == 'h' && data[i+3] >= '1' && data[i+3] <= '9' &&
			(bytes.Equal(data[i+4:i+10], []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}) ||
				bytes.Equal(data[i+4:i+10], []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90})) {
			starts = append(starts, i)
		}
	}
	if len(starts) == 0 || starts[0] != 0 {
		return 0
	}
	good := 0
	// Try the longest pieces first: a signature inside compressed data
	// only splits a stream in two, and the whole still decodes.
	for good < len(data) {
		next := -1
		for j := len(starts) - 1; j >= 0 && starts[j] > good; j-- {
			if decodesBzip2(data[good:starts[j]]) {
				next = starts[j]
				break
			}
		}
		if next < 0 {
			if decodesBzip2(data[good:]) {
				return len(data)
			}
			break
		}
		good = next
	}
	return good
}

func decodesBzip2(p []byte) bool {
	_, err := io.Copy(io.Discard, bzip2.NewReader(bytes.NewReader(p)))
	return err == nil
}

// scanZstd walks zstd frames (RFC 8878): magic, frame header, blocks with
// 3-byte headers, optional checksum; it returns the end of the last
// complete frame.
func scanZstd(data []byte) int {
	good := 0
	for {
		end := zstdFrameEnd(data[good:])
		if end <= 0 {
			return good
		}
		good += end
	}
}

func zstdFrameEnd(d []byte) int {
	if len(d) < 6 || binary.LittleEndian.Uint32(d) != 0xFD2FB528 {
		return 0
	}
	fhd := d[4]
	pos := 5
	single := fhd&0x20 != 0
	if !single {
		pos++ // window descriptor
	}
	pos += [4]int{0, 1, 2, 4}[fhd&3] // dictionary id
	fcs := [4]int{0, 2, 4, 8}[fhd>>6]
	if fcs == 0 && single {
		fcs = 1
	}
	pos += fcs
	for {
		if pos+3 > len(d) {
			return 0
		}
		h := uint32(d[pos]) | uint32(d[pos+1])<<8 | uint32(d[pos+2])<<16
		pos += 3
		size := int(h >> 3)
		if (h>>1)&3 == 1 { // RLE block: one byte
			size = 1
		}
		pos += size
		if pos > len(d) {
			return 0
		}
		if h&1 != 0 {
			break
		}
	}
	if fhd&0x04 != 0 {
		pos += 4
	}
	if pos > len(d) {
		return 0
	}
	return pos
}

// scanBlocks returns the end of the last complete block of Hadoop's block
// framing.
func scanBlocks(data []byte, decode func(chunk []byte, room int) (int, error)) int {
	good, pos := 0, 0
	for pos+4 <= len(data) {
		want := int(binary.BigEndian.Uint32(data[pos:]))
		pos += 4
		if want > maxBlockInput {
			return good // not a block sluice (or Hadoop, with 256 KiB buffers) writes
		}
		// Hadoop's reader decodes chunks until the block's length came out.
		got := 0
		for got < want {
			if pos+4 > len(data) {
				return good
			}
			clen := int(binary.BigEndian.Uint32(data[pos:]))
			pos += 4
			if clen <= 0 || pos+clen > len(data) {
				return good
			}
			n, err := decode(data[pos:pos+clen], want-got)
			if err != nil {
				return good
			}
			got += n
			pos += clen
		}
		if got != want {
			return good
		}
		good = pos
	}
	return good
}

// maxBlockInput bounds the uncompressed size of one block that recovery
// believes (Hadoop's buffers are 256 KiB).
const maxBlockInput = 16 << 20

func scanSnappy(data []byte) int {
	return scanBlocks(data, func(chunk []byte, room int) (int, error) {
		n, err := s2.DecodedLen(chunk)
		if err != nil || n > room {
			return 0, errors.New("bad snappy chunk")
		}
		_, err = s2.Decode(make([]byte, n), chunk)
		return n, err
	})
}

func scanLz4(data []byte) int {
	return scanBlocks(data, func(chunk []byte, room int) (int, error) {
		return lz4.UncompressBlock(chunk, make([]byte, room))
	})
}
