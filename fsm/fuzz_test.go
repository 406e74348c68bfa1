package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"time"
)

// FuzzDecodeCommand: garbage never panics, and whatever decodes re-encodes
// to bytes that decode to the same command and apply without panicking.
func FuzzDecodeCommand(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, now := range randomTimes(r, 20, time.Second) {
		f.Add(AppendCommand(nil, randomCommand(r, now)))
	}
	f.Add([]byte{commandVersion, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := DecodeCommand(b)
		if err != nil {
			return
		}
		again, err := DecodeCommand(AppendCommand(nil, cmd))
		if err != nil {
			t.Fatalf("re-encoded command does not decode: %v", err)
		}
		if fmt.Sprintf("%+v", again) != fmt.Sprintf("%+v", cmd) {
			t.Fatalf("round trip changed the command")
		}
		New(Config{}).Apply(cmd, nil)
	})
}

// FuzzDecodeResults: garbage never panics.
func FuzzDecodeResults(f *testing.F) {
	m := New(Config{})
	r := rand.New(rand.NewPCG(7, 8))
	for _, now := range randomTimes(r, 10, time.Second) {
		f.Add(AppendResults(nil, m.Apply(randomCommand(r, now), nil)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := DecodeResults(b)
		if err == nil && len(AppendResults(nil, rs)) == 0 {
			t.Fatal("decoded results do not encode")
		}
	})
}

// FuzzRestore: a damaged snapshot is refused without panicking and without
// touching the machine; an accepted one round-trips byte for byte.
func FuzzRestore(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	src := New(Config{})
	for _, now := range randomTimes(r, 100, 300*time.Millisecond) {
		src.Apply(randomCommand(r, now), nil)
		var b bytes.Buffer
		if err := src.Snapshot(&b); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	// Split states: a fenced parent with its frozen copy, and a child
	// halfway through loading.
	fence := &Control{Kind: CtlFence, Keep: Range{0, 1<<63 - 1}, Move: Range{1 << 63, 1<<64 - 1}}
	if err := src.ApplyControl(fence); err != nil {
		f.Fatal(err)
	}
	var b bytes.Buffer
	if err := src.Snapshot(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	chunk, _, err := src.ExportChunk(0)
	if err != nil {
		f.Fatal(err)
	}
	child := New(Config{})
	if err := child.ApplyControl(&Control{Kind: CtlAdopt, Keep: fence.Move, Chunk: chunk}); err != nil {
		f.Fatal(err)
	}
	b.Reset()
	if err := child.Snapshot(&b); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		restoreOrReject(t, b)
		// Again with a valid checksum, so the fuzzer explores the decoder
		// behind it rather than the CRC.
		if len(b) > 4 {
			body := b[: len(b)-4 : len(b)-4]
			restoreOrReject(t, binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli)))
		}
	})
}

func restoreOrReject(t *testing.T, b []byte) {
	m := New(Config{})
	m.Apply(&Command{Now: t0, Ops: []Op{{Kind: OpTake, Key: "x", Limit: Limit{Algorithm: GCRA, Limit: 5, Period: time.Hour}, Cost: 2}}}, nil)
	before := snapshotBytes(t, m)
	if err := m.Restore(bytes.NewReader(b)); err != nil {
		if !bytes.Equal(before, snapshotBytes(t, m)) {
			t.Fatal("failed Restore changed the machine")
		}
		return
	}
	r := rand.New(rand.NewPCG(1, 1))
	for i := range 20 {
		cmd := randomCommand(r, m.Now()+int64(i)*int64(time.Millisecond))
		for id := range uint64(4) { // return whatever leases the snapshot had
			cmd.Ops = append(cmd.Ops, Op{Kind: OpReturn, Lease: id, Cost: 1})
		}
		m.Apply(cmd, nil)
	}
}
