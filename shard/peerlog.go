package shard

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft logs every failed heartbeat, append and vote, per group: with a peer
// dead, a node of tens of groups writes hundreds of lines in seconds, and
// the one line that says what happened drowns. A host's groups therefore
// log through one peerLog, which reports a peer that cannot be reached
// once, then a summary every PeerLogEvery while it lasts, and when raft's
// heartbeats reach it again.

// PeerLogEvery is how often a peer that stays unreachable is summarized.
const PeerLogEvery = 30 * time.Second

// maxDownPeers bounds the peers tracked as unreachable; errors about more
// peers than that are logged as raft logs them.
const maxDownPeers = 256

// unreachableMsgs are raft's messages (hashicorp/raft v1.8) that say a
// peer could not be reached. Other messages pass unchanged.
var unreachableMsgs = map[string]bool{
	"failed to heartbeat to":                  true,
	"failed to appendEntries to":              true,
	"failed to pipeline appendEntries":        true,
	"failed to start pipeline replication to": true,
	"failed to make requestVote RPC":          true,
	"failed to contact":                       true,
	"failed to send snapshot to":              true,
	"failed to install snapshot":              true,
}

// peerLog is the unreachable-peer state shared by a host's group loggers.
// Its fields are set at construction except those under mu; names is
// replaced whole (SetPeerNames).
type peerLog struct {
	out        hclog.Logger // the "raft" logger lines go to
	now        func() time.Time
	every      time.Duration
	names      atomic.Pointer[map[string]string] // peer address -> node id
	suppressed atomic.Uint64

	mu   sync.Mutex
	down map[string]*peerDown // by peer name; at most maxDownPeers
}

// peerDown is one unreachable peer.
type peerDown struct {
	since, reported, last time.Time
	n                     uint64 // errors suppressed since reported
}

func newPeerLog(out hclog.Logger, now func() time.Time, every time.Duration) *peerLog {
	if now == nil {
		now = time.Now
	}
	return &peerLog{out: out, now: now, every: every, down: map[string]*peerDown{}}
}

// setNames sets the node id of each peer address, for the lines to name
// nodes rather than addresses.
func (p *peerLog) setNames(names map[string]string) { p.names.Store(&names) }

// peerName names the peer that args (a raft log call's key-value pairs)
// are about, "" if none.
func (p *peerLog) peerName(args []any) string {
	for k := 0; k+1 < len(args); k += 2 {
		if key, _ := args[k].(string); key != "peer" && key != "target" && key != "server-id" {
			continue
		}
		switch v := args[k+1].(type) {
		case raft.Server:
			if v.ID != "" {
				return string(v.ID)
			}
			return p.addrName(string(v.Address))
		case raft.ServerAddress:
			return p.addrName(string(v))
		case raft.ServerID:
			return string(v)
		}
	}
	return ""
}

func (p *peerLog) addrName(addr string) string {
	if m := p.names.Load(); m != nil && (*m)[addr] != "" {
		return (*m)[addr]
	}
	return addr
}

// pass reports whether a line raft logs in group should be written as it
// is; if not, peerLog has reported or counted it.
func (p *peerLog) pass(group, msg string, args []any) bool {
	if !unreachableMsgs[msg] {
		return true
	}
	name := p.peerName(args)
	if name == "" {
		return true
	}
	now := p.now()
	p.mu.Lock()
	d, ok := p.down[name]
	if ok && now.Sub(d.last) >= p.every {
		// Quiet for a while: that outage ended unseen (this node stopped
		// sending to the peer, or stopped leading), and this is a new one.
		delete(p.down, name)
		ok = false
	}
	switch {
	case !ok && len(p.down) >= maxDownPeers:
		p.mu.Unlock()
		return true
	case !ok:
		p.down[name] = &peerDown{since: now, reported: now, last: now}
		p.mu.Unlock()
		p.out.Error(fmt.Sprintf("peer %s unreachable (first error, %s: %s: %v); more errors about it are summarized every %v",
			name, group, msg, errArg(args), p.every))
		return false
	}
	d.n++
	d.last = now
	p.suppressed.Add(1)
	var summary string
	if now.Sub(d.reported) >= p.every {
		summary = fmt.Sprintf("peer %s still unreachable after %v; %d more errors suppressed", name, now.Sub(d.since).Round(time.Second), d.n)
		d.reported, d.n = now, 0
	}
	p.mu.Unlock()
	if summary != "" {
		p.out.Warn(summary)
	}
	return false
}

// reachable reports that raft reached peer id again (a heartbeat answered
// after failures), if it was reported unreachable.
func (p *peerLog) reachable(id string) {
	now := p.now()
	p.mu.Lock()
	d, ok := p.down[id]
	delete(p.down, id)
	p.mu.Unlock()
	if ok {
		p.out.Info(fmt.Sprintf("peer %s reachable again after %v; %d more errors suppressed", id, now.Sub(d.since).Round(time.Second), d.n))
	}
}

// errArg is the "error" value of a raft log call, or "-".
func errArg(args []any) any {
	for k := 0; k+1 < len(args); k += 2 {
		if args[k] == "error" {
			return args[k+1]
		}
	}
	return "-"
}

// groupLogger is the hclog.Logger a raft group logs through: warnings and
// errors go to the host's raft logger, except what peerLog takes.
type groupLogger struct {
	hclog.Logger // the host's raft logger, named after the group
	group        string
	peers        *peerLog
}

func (l *groupLogger) Log(level hclog.Level, msg string, args ...any) {
	if level >= hclog.Warn && l.peers.pass(l.group, msg, args) {
		l.Logger.Log(level, msg, args...)
	}
}

func (l *groupLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }
func (l *groupLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }

// Raft's chatter below warnings stays out, as before: the host's logger
// is at info for peerLog's "reachable again".
func (l *groupLogger) Info(string, ...any)  {}
func (l *groupLogger) Debug(string, ...any) {}
func (l *groupLogger) Trace(string, ...any) {}
func (l *groupLogger) IsInfo() bool         { return false }
func (l *groupLogger) IsDebug() bool        { return false }
func (l *groupLogger) IsTrace() bool        { return false }
func (l *groupLogger) GetLevel() hclog.Level {
	return hclog.Warn
}

func (l *groupLogger) Named(name string) hclog.Logger {
	return &groupLogger{Logger: l.Logger.Named(name), group: l.group, peers: l.peers}
}

func (l *groupLogger) ResetNamed(name string) hclog.Logger {
	return &groupLogger{Logger: l.Logger.ResetNamed(name), group: l.group, peers: l.peers}
}

func (l *groupLogger) With(args ...any) hclog.Logger {
	return &groupLogger{Logger: l.Logger.With(args...), group: l.group, peers: l.peers}
}
