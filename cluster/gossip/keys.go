package gossip

import (
	"bytes"
	"fmt"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// encrypt gives memberlist the keyring (primary first) and turns its
// log into the node's, keeping only what says a peer's key is wrong: a node
// with another key is otherwise just silently unreachable.
func encrypt(g *Gossip, mc *memberlist.Config, keys [][]byte, l *slog.Logger) error {
	if len(keys) == 0 {
		return fmt.Errorf("gossip: --gossip-key or --gossip-keyring is required")
	}
	ring, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return fmt.Errorf("gossip: keyring: %w", err)
	}
	mc.Keyring = ring
	g.keyring = ring
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.Logger = log.New(&keyLog{log: l, every: 10 * time.Second}, "", 0)
	return nil
}

// keyLog passes on memberlist's complaints about encryption, at most one
// per interval, since a misconfigured peer triggers one per message.
type keyLog struct {
	log   *slog.Logger
	every time.Duration

	mu   sync.Mutex
	last time.Time // guarded by mu
}

func (k *keyLog) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	if !strings.Contains(strings.ToLower(line), "crypt") {
		return len(p), nil
	}
	k.mu.Lock()
	now := time.Now()
	quiet := now.Sub(k.last) < k.every
	if !quiet {
		k.last = now
	}
	k.mu.Unlock()
	if !quiet {
		k.log.Error("gossip: refused a message that this node's gossip keyring cannot decrypt: a node or client with another --gossip-key is trying to talk to this one", "memberlist", line)
	}
	return len(p), nil
}

// logJoinFailure says why no seed could be joined: loudly when a seed's
// keyring refused this node, quietly while seeds are merely not up yet.
func logJoinFailure(l *slog.Logger, seeds []string, err error) {
	if strings.Contains(err.Error(), "decrypt") || strings.Contains(err.Error(), "encrypt") {
		l.Error("gossip: the seeds refuse this node: their gossip keyring differs from this node's (--gossip-key or --gossip-keyring must hold the seeds' primary key)", "seeds", seeds, "err", err)
		return
	}
	l.Debug("gossip: no seed could be joined yet", "seeds", seeds, "err", err)
}

// SetKeys makes keys the keyring, keys[0] the primary: rotation one step at
// a time, each step on every node before the next (README "Security
// model"), so that no two nodes are ever without a key in common.
func (g *Gossip) SetKeys(keys [][]byte) error {
	for _, k := range keys {
		if err := g.keyring.AddKey(k); err != nil {
			return fmt.Errorf("gossip: keyring: %w", err)
		}
	}
	if err := g.keyring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip: keyring: %w", err)
	}
	for _, old := range g.keyring.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := g.keyring.RemoveKey(old); err != nil {
				return fmt.Errorf("gossip: keyring: %w", err)
			}
		}
	}
	return nil
}
