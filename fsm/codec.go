package fsm

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Commands and results travel through Raft as compact binary: a version byte,
// then varints and length-prefixed strings. Decoders never trust a length:
// every count is checked against the bytes that remain, so garbage yields
// ErrCorrupt, never a panic or a huge allocation.

const (
	// commandVersion 2 adds Op.Held. Commands without it are written as
	// version 1, which every build reads, so a cluster being upgraded keeps
	// applying them; both versions decode.
	commandVersion = 2
	resultsVersion = 1
	// MaxOps bounds the operations in one command.
	MaxOps = 1 << 16
	// minOpSize is the fewest bytes an encoded op takes, used to bound counts.
	minOpSize = 13
)

// AppendCommand appends the encoding of c to dst.
func AppendCommand(dst []byte, c *Command) []byte {
	version := byte(1)
	for i := range c.Ops {
		if c.Ops[i].Held != 0 {
			version = commandVersion
		}
	}
	dst = append(dst, version)
	dst = binary.AppendVarint(dst, c.Now)
	dst = binary.AppendUvarint(dst, uint64(len(c.Ops)))
	for i := range c.Ops {
		op := &c.Ops[i]
		dst = append(dst, byte(op.Kind))
		dst = appendString(dst, op.Key)
		dst = appendLimit(dst, op.Limit)
		dst = binary.AppendVarint(dst, op.Cost)
		dst = appendString(dst, op.IdempotencyKey)
		dst = appendString(dst, op.Holder)
		dst = binary.AppendVarint(dst, int64(op.TTL))
		dst = binary.AppendUvarint(dst, op.Lease)
		dst = binary.AppendUvarint(dst, uint64(op.Group))
		dst = binary.AppendVarint(dst, op.At)
		if version >= 2 {
			dst = binary.AppendVarint(dst, op.Held)
		}
	}
	return dst
}

// DecodeCommand decodes a command encoded by AppendCommand.
func DecodeCommand(b []byte) (*Command, error) {
	d := decoder{b: b}
	v := d.byte()
	if d.err == nil && (v < 1 || v > commandVersion) {
		return nil, fmt.Errorf("%w: command version %d", ErrVersion, v)
	}
	c := &Command{Now: d.varint()}
	n := d.count(MaxOps, minOpSize)
	if n > 0 {
		c.Ops = make([]Op, n)
	}
	for i := range c.Ops {
		op := &c.Ops[i]
		op.Kind = OpKind(d.byte())
		op.Key = d.string(MaxKeyLen)
		op.Limit = d.limit()
		op.Cost = d.varint()
		op.IdempotencyKey = d.string(MaxKeyLen)
		op.Holder = d.string(MaxHolderLen)
		op.TTL = time.Duration(d.varint())
		op.Lease = d.uvarint()
		op.Group = uint32(d.uvarint())
		op.At = d.varint()
		if v >= 2 {
			op.Held = d.varint()
		}
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// AppendResults appends the encoding of rs to dst. An error is carried as
// its code, so it decodes as the package's sentinel error.
func AppendResults(dst []byte, rs []Result) []byte {
	dst = append(dst, resultsVersion)
	dst = binary.AppendUvarint(dst, uint64(len(rs)))
	for i := range rs {
		dst = appendResult(dst, &rs[i])
	}
	return dst
}

// DecodeResults decodes results encoded by AppendResults.
func DecodeResults(b []byte) ([]Result, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != resultsVersion {
		return nil, fmt.Errorf("%w: results version %d", ErrVersion, v)
	}
	rs := make([]Result, d.count(MaxOps, 10))
	for i := range rs {
		rs[i] = d.result()
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return rs, nil
}

func appendResult(dst []byte, r *Result) []byte {
	var flags byte
	if r.Allowed {
		flags |= 1
	}
	if r.Replayed {
		flags |= 2
	}
	if r.Refunded {
		flags |= 4
	}
	if !r.Filter.Empty() {
		flags |= 8
	}
	if !r.Range.IsZero() {
		flags |= 16
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, errorCode(r.Err))
	for _, v := range [...]int64{r.Limit, r.Remaining, int64(r.ResetAfter), int64(r.RetryAfter), int64(r.Delay), r.Granted, r.Expires} {
		dst = binary.AppendVarint(dst, v)
	}
	dst = binary.AppendUvarint(dst, r.Lease)
	if !r.Filter.Empty() {
		dst = appendFilter(dst, r.Filter)
	}
	if !r.Range.IsZero() {
		dst = binary.LittleEndian.AppendUint64(dst, r.Range.Lo)
		dst = binary.LittleEndian.AppendUint64(dst, r.Range.Hi)
	}
	return dst
}

func (d *decoder) result() Result {
	flags := d.byte()
	r := Result{Allowed: flags&1 != 0, Replayed: flags&2 != 0, Refunded: flags&4 != 0}
	if flags > 31 {
		d.fail()
	}
	r.Err = codeError(d.uvarint())
	r.Limit, r.Remaining = d.varint(), d.varint()
	r.ResetAfter, r.RetryAfter, r.Delay = time.Duration(d.varint()), time.Duration(d.varint()), time.Duration(d.varint())
	r.Granted, r.Expires = d.varint(), d.varint()
	r.Lease = d.uvarint()
	if flags&8 != 0 {
		r.Filter = d.filter()
	}
	if flags&16 != 0 {
		r.Range = Range{Lo: d.u64(), Hi: d.u64()}
		if d.err == nil && (r.Range.IsZero() || r.Range.Lo > r.Range.Hi) {
			d.fail() // written only when non-zero, and always ordered
		}
	}
	return r
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendLimit(dst []byte, l Limit) []byte {
	dst = append(dst, byte(l.Algorithm))
	dst = binary.AppendVarint(dst, l.Limit)
	dst = binary.AppendVarint(dst, int64(l.Period))
	return binary.AppendVarint(dst, l.Burst)
}

// decoder reads the encodings above. The first error sticks; later reads
// return zero values, so callers check once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = ErrCorrupt
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// count reads a count of items of at least minSize bytes each.
func (d *decoder) count(max, minSize int) int {
	n := d.uvarint()
	if n > uint64(max) || n > uint64(len(d.b)/minSize) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) string(max int) string {
	n := d.uvarint()
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) limit() Limit {
	return Limit{
		Algorithm: Algorithm(d.byte()),
		Limit:     d.varint(),
		Period:    time.Duration(d.varint()),
		Burst:     d.varint(),
	}
}

// finish reports the sticky error, or ErrCorrupt if bytes are left over.
func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	return d.err
}
