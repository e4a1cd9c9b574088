package hdfssink

// An independent SequenceFile reader, written from Hadoop's format
// description (the SequenceFile class comment and Writable encodings), not
// from the writer: it shares no code with seqfile.go, decompresses with
// other libraries (the standard library's gzip, zlib and bzip2,
// golang/snappy), and checks every structural rule the format states.

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

type seqRecord struct {
	key   int64
	value []byte
}

type seqFile struct {
	keyClass, valueClass string
	compressed, block    bool
	codec                string
	records              []seqRecord
	syncs                int // sync entries seen after the header
}

// readVInt is WritableUtils.readVLong: the first byte is the value when
// >= -112; else it tells the length and sign of the big-endian bytes that
// follow.
func readVIntFrom(r io.ByteReader) (int64, error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	first := int8(b)
	if first >= -112 {
		return int64(first), nil
	}
	var size int
	negative := first < -120
	if negative {
		size = -119 - int(first)
	} else {
		size = -111 - int(first)
	}
	var v int64
	for i := 0; i < size-1; i++ {
		c, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		v = v<<8 | int64(c)
	}
	if negative {
		v = ^v
	}
	return v, nil
}

func readHadoopText(r *bufio.Reader) (string, error) {
	n, err := readVIntFrom(r)
	if err != nil {
		return "", err
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return string(b), err
}

func decompress(codecClass string, data []byte) ([]byte, error) {
	switch codecClass {
	case "org.apache.hadoop.io.compress.GzipCodec":
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	case "org.apache.hadoop.io.compress.DefaultCodec":
		zr, err := zlib.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	case "org.apache.hadoop.io.compress.BZip2Codec":
		return io.ReadAll(bzip2.NewReader(bytes.NewReader(data)))
	case "org.apache.hadoop.io.compress.ZStandardCodec":
		d, err := zstd.NewReader(nil)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		return d.DecodeAll(data, nil)
	case "org.apache.hadoop.io.compress.SnappyCodec", "org.apache.hadoop.io.compress.Lz4Codec":
		return readBlockFraming(codecClass, data)
	}
	return nil, fmt.Errorf("codec %s unknown to the test reader", codecClass)
}

// readBlockFraming reads Hadoop's BlockDecompressorStream framing: blocks
// of [uncompressed length][compressed chunks, each length-prefixed].
func readBlockFraming(codecClass string, data []byte) ([]byte, error) {
	var out []byte
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, fmt.Errorf("torn block header")
		}
		want := int(binary.BigEndian.Uint32(data))
		data = data[4:]
		got := 0
		for got < want {
			if len(data) < 4 {
				return nil, fmt.Errorf("torn chunk header")
			}
			clen := int(binary.BigEndian.Uint32(data))
			data = data[4:]
			if clen > len(data) {
				return nil, fmt.Errorf("torn chunk")
			}
			var chunk []byte
			var err error
			if codecClass == "org.apache.hadoop.io.compress.SnappyCodec" {
				chunk, err = snappy.Decode(nil, data[:clen])
			} else {
				buf := make([]byte, want-got)
				var n int
				n, err = lz4.UncompressBlock(data[:clen], buf)
				chunk = buf[:n]
			}
			if err != nil {
				return nil, err
			}
			out = append(out, chunk...)
			got += len(chunk)
			data = data[clen:]
		}
		if got != want {
			return nil, fmt.Errorf("block decoded to %d bytes, header says %d", got, want)
		}
	}
	return out, nil
}

// decodeValue reads a value of class cls from the whole of b.
func decodeValue(cls string, b []byte) ([]byte, error) {
	switch cls {
	case "org.apache.hadoop.io.BytesWritable":
		if len(b) < 4 || int(binary.BigEndian.Uint32(b)) != len(b)-4 {
			return nil, fmt.Errorf("BytesWritable length does not match its record")
		}
		return b[4:], nil
	case "org.apache.hadoop.io.Text":
		br := bufio.NewReader(bytes.NewReader(b))
		n, err := readVIntFrom(br)
		if err != nil {
			return nil, err
		}
		rest, _ := io.ReadAll(br)
		if int(n) != len(rest) {
			return nil, fmt.Errorf("Text length %d does not match its record (%d)", n, len(rest))
		}
		return rest, nil
	}
	return nil, fmt.Errorf("value class %s unknown to the test reader", cls)
}

// readSeqFile parses a whole SequenceFile.
func readSeqFile(data []byte) (*seqFile, error) {
	r := bufio.NewReader(bytes.NewReader(data))
	magic := make([]byte, 4)
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != "SEQ\x06" {
		return nil, fmt.Errorf("bad magic %q", magic)
	}
	f := &seqFile{}
	var err error
	if f.keyClass, err = readHadoopText(r); err != nil {
		return nil, err
	}
	if f.valueClass, err = readHadoopText(r); err != nil {
		return nil, err
	}
	c, _ := r.ReadByte()
	bl, _ := r.ReadByte()
	f.compressed, f.block = c == 1, bl == 1
	if f.compressed {
		if f.codec, err = readHadoopText(r); err != nil {
			return nil, err
		}
	}
	var nmeta int32
	if err := binary.Read(r, binary.BigEndian, &nmeta); err != nil {
		return nil, err
	}
	for range nmeta {
		for range 2 { // a key and a value
			if _, err := readHadoopText(r); err != nil {
				return nil, err
			}
		}
	}
	sync := make([]byte, 16)
	if _, err := io.ReadFull(r, sync); err != nil {
		return nil, err
	}
	if f.keyClass != "org.apache.hadoop.io.LongWritable" {
		return nil, fmt.Errorf("key class %s", f.keyClass)
	}
	if f.block {
		return f, readBlocks(r, f, sync)
	}
	if f.compressed {
		return nil, fmt.Errorf("record-compressed files are not written by Flume")
	}
	for {
		var l int32
		if err := binary.Read(r, binary.BigEndian, &l); errors.Is(err, io.EOF) {
			return f, nil
		} else if err != nil {
			return nil, fmt.Errorf("torn record length: %w", err)
		}
		if l == -1 {
			got := make([]byte, 16)
			if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, sync) {
				return nil, fmt.Errorf("bad sync entry")
			}
			f.syncs++
			continue
		}
		var kl int32
		if err := binary.Read(r, binary.BigEndian, &kl); err != nil {
			return nil, err
		}
		if kl != 8 || l < kl {
			return nil, fmt.Errorf("record length %d key length %d", l, kl)
		}
		rec := make([]byte, l)
		if _, err := io.ReadFull(r, rec); err != nil {
			return nil, fmt.Errorf("torn record: %w", err)
		}
		v, err := decodeValue(f.valueClass, rec[8:])
		if err != nil {
			return nil, err
		}
		f.records = append(f.records, seqRecord{key: int64(binary.BigEndian.Uint64(rec)), value: v})
	}
}

// readBlocks reads the blocks of a block-compressed file: each a sync
// entry, the record count, then four compressed buffers (key lengths,
// keys, value lengths, values).
func readBlocks(r *bufio.Reader, f *seqFile, sync []byte) error {
	for {
		var esc int32
		if err := binary.Read(r, binary.BigEndian, &esc); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("torn block: %w", err)
		}
		got := make([]byte, 16)
		if _, err := io.ReadFull(r, got); esc != -1 || err != nil || !bytes.Equal(got, sync) {
			return fmt.Errorf("a block does not start with this file's sync entry")
		}
		f.syncs++
		n, err := readVIntFrom(r)
		if err != nil {
			return fmt.Errorf("torn block count: %w", err)
		}
		var bufs [4][]byte
		for i := range bufs {
			l, err := readVIntFrom(r)
			if err != nil {
				return err
			}
			c := make([]byte, l)
			if _, err := io.ReadFull(r, c); err != nil {
				return fmt.Errorf("torn block buffer: %w", err)
			}
			if bufs[i], err = decompress(f.codec, c); err != nil {
				return fmt.Errorf("block buffer %d: %w", i, err)
			}
		}
		kl, keys := bufio.NewReader(bytes.NewReader(bufs[0])), bufs[1]
		vl, vals := bufio.NewReader(bytes.NewReader(bufs[2])), bufs[3]
		for range n {
			k, err := readVIntFrom(kl)
			if err != nil || k != 8 || len(keys) < 8 {
				return fmt.Errorf("key length %d", k)
			}
			key := int64(binary.BigEndian.Uint64(keys))
			keys = keys[8:]
			v, err := readVIntFrom(vl)
			if err != nil || int(v) > len(vals) {
				return fmt.Errorf("value length %d", v)
			}
			val, err := decodeValue(f.valueClass, vals[:v])
			if err != nil {
				return err
			}
			vals = vals[v:]
			f.records = append(f.records, seqRecord{key: key, value: val})
		}
		if len(keys) != 0 || len(vals) != 0 {
			return fmt.Errorf("block holds more than its %d records", n)
		}
	}
}
