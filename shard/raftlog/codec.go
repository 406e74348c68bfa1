package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

const (
	kindAppend byte = 1
	kindDelete byte = 2

	frameHeader = 8
	// maxFrame bounds one frame's payload: raft's largest AppendEntries
	// carries 256 entries, and the node refuses messages over 64 MiB.
	maxFrame = 256 << 20
	// maxGroupName bounds a group's name in a frame.
	maxGroupName = 1024
	// minLogSize is the fewest bytes an encoded log takes: index, term,
	// type, appendedAt and two empty lengths.
	minLogSize = 6
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt: bytes that do not decode as the format says.
var errCorrupt = errors.New("raftlog: corrupt record")

// record is one decoded frame.
type record struct {
	kind  byte
	group string
	// append: the first entry's index, and where each entry's encoding
	// lies within the payload.
	first uint64
	spans []span
	// delete: the inclusive range.
	min, max uint64
}

type span struct{ off, n uint32 }

// appendFrame appends a frame for an append of logs to group to dst, and
// returns where each log's encoding lies relative to the frame's start.
func appendFrame(dst []byte, group string, logs []*raft.Log) ([]byte, []span) {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeader)...)
	dst = append(dst, kindAppend)
	dst = appendBytes(dst, []byte(group))
	dst = binary.AppendUvarint(dst, uint64(len(logs)))
	spans := make([]span, len(logs))
	for i, l := range logs {
		at := len(dst)
		dst = appendLog(dst, l)
		spans[i] = span{off: uint32(at - start), n: uint32(len(dst) - at)}
	}
	return sealFrame(dst, start), spans
}

// deleteFrame appends a frame deleting min..max of group to dst.
func deleteFrame(dst []byte, group string, min, max uint64) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeader)...)
	dst = append(dst, kindDelete)
	dst = appendBytes(dst, []byte(group))
	dst = binary.AppendUvarint(dst, min)
	dst = binary.AppendUvarint(dst, max)
	return sealFrame(dst, start)
}

func sealFrame(dst []byte, start int) []byte {
	payload := dst[start+frameHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, crcTable))
	return dst
}

func appendLog(dst []byte, l *raft.Log) []byte {
	dst = binary.AppendUvarint(dst, l.Index)
	dst = binary.AppendUvarint(dst, l.Term)
	dst = append(dst, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	dst = binary.AppendVarint(dst, at)
	dst = appendBytes(dst, l.Data)
	return appendBytes(dst, l.Extensions)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// readFrame decodes the frame at the start of b. It returns the record and
// the frame's size; ok is false when b holds no whole, intact frame (a torn
// or corrupt tail), err when the frame is intact but does not decode.
func readFrame(b []byte) (rec record, size int, ok bool, err error) {
	if len(b) < frameHeader {
		return rec, 0, false, nil
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > maxFrame || uint64(n) > uint64(len(b)-frameHeader) {
		return rec, 0, false, nil
	}
	payload := b[frameHeader : frameHeader+int(n)]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return rec, 0, false, nil
	}
	rec, err = decodePayload(payload)
	return rec, frameHeader + int(n), true, err
}

func decodePayload(p []byte) (record, error) {
	d := decoder{b: p}
	rec := record{kind: d.byte(), group: string(d.bytes(maxGroupName))}
	switch rec.kind {
	case kindAppend:
		count := d.uvarint()
		if d.err == nil && count > uint64(len(d.b)/minLogSize) {
			return rec, fmt.Errorf("%w: %d entries in %d bytes", errCorrupt, count, len(d.b))
		}
		rec.spans = make([]span, 0, count)
		for i := uint64(0); i < count && d.err == nil; i++ {
			at := len(p) - len(d.b)
			var l raft.Log
			d.log(&l)
			if i == 0 {
				rec.first = l.Index
			} else if l.Index != rec.first+i {
				return rec, fmt.Errorf("%w: entry %d follows %d", errCorrupt, l.Index, rec.first+i-1)
			}
			rec.spans = append(rec.spans, span{off: uint32(frameHeader + at), n: uint32(len(p) - len(d.b) - at)})
		}
		if d.err == nil && count == 0 {
			d.err = fmt.Errorf("%w: empty append", errCorrupt)
		}
	case kindDelete:
		rec.min, rec.max = d.uvarint(), d.uvarint()
	default:
		if d.err == nil {
			d.err = fmt.Errorf("%w: kind %d", errCorrupt, rec.kind)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(d.b))
	}
	return rec, d.err
}

// decodeLog decodes one log's encoding (a span of an append frame).
func decodeLog(b []byte, l *raft.Log) error {
	d := decoder{b: b}
	d.log(l)
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(d.b))
	}
	return d.err
}

// decoder reads varints and lengths, checking each against what remains;
// the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(max int) []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(max) || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) log(l *raft.Log) {
	l.Index = d.uvarint()
	l.Term = d.uvarint()
	l.Type = raft.LogType(d.byte())
	if at := d.varint(); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	} else {
		l.AppendedAt = time.Time{}
	}
	l.Data = nilIfEmpty(d.bytes(maxFrame))
	l.Extensions = nilIfEmpty(d.bytes(maxFrame))
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
