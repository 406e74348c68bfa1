// Package raftlog is a node's write-ahead log: one append-only file set
// shared by every Raft group on the node, so that one write and one fsync
// carry the entries of all groups that appended at about the same time.
//
// A node hosts many groups. With a log store per group (raft-boltdb's B+tree
// before this package), every group paid its own transaction and its own
// fsyncs for every entry it appended, leader and follower alike, and that,
// not the disk, bounded strict checks. Here a WAL has one writer goroutine:
// groups hand it encoded records and wait; it takes everything queued, writes
// it with one write call, fdatasyncs once and answers them all (group commit
// across groups, the way multi-raft stores such as CockroachDB and TiKV do
// it). Under load the number of fsyncs per second stays near one per disk
// round trip whatever the number of groups.
//
// Each group sees its own raft.LogStore (WAL.Log). In memory a group keeps
// only where each entry lies (segment, offset, length); GetLog reads the
// entry back with one pread, and raft.LogCache in front of the store serves
// the entries replication reads most.
//
// On disk the log is a sequence of segment files (<id>.wal, rotated at
// Options.SegmentSize), each a sequence of frames:
//
//	frame   = len u32 | crc32c(payload) u32 | payload
//	payload = kind byte | group string | body
//	append  = count uvarint | count × (index uvarint | term uvarint | type byte |
//	          appendedAt varint | data bytes | extensions bytes)
//	delete  = min uvarint | max uvarint
//
// Strings and bytes are a uvarint length and the bytes. Open replays every
// segment in order, rebuilding each group's index. A frame that is cut short
// or fails its checksum at the end of the last segment is the write a crash
// interrupted: it was never acknowledged, and the file is truncated there. A
// bad frame anywhere else is corruption and Open refuses to start.
//
// A segment is deleted once no group has a live entry in it. Deletions
// (raft's DeleteRange) are records too, so replay ends in the same state.
// Raft's contract for a log store is kept: entries of one group are
// consecutive; appending after a gap, or below the first index, restarts the
// group's log there (raft does this after installing a snapshot, and reports
// the store as monotonic, see IsMonotonic).
package raftlog
