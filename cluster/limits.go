package cluster

import (
	"fmt"
	"time"

	"github.com/quorate/quorate/rpc/codec"
)

// Limits bound what one client can make a node do, and how a sick shard
// is answered. Zero values take the defaults.
type Limits struct {
	// MaxRecvMsgSize bounds a client's gRPC message, in bytes (default
	// 4 MiB). Larger ones are refused with RESOURCE_EXHAUSTED before they
	// are decoded.
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the calls in progress on one client
	// connection (default 1024); further calls wait for a free one.
	MaxConcurrentStreams uint32
	// MaxRequestItems bounds the items of one check (default 1000).
	MaxRequestItems int
	// MaxRequestCost bounds the sum of the costs of one check's items
	// (default 1,000,000).
	MaxRequestCost int64
	// BreakerFailures is how many failures of a shard in a row open its
	// breaker (default 3). Only the shard's own failures count: no leader
	// or no quorum within the check timeout, leadership lost under a
	// command, a commit that outlived the check timeout. A caller's
	// cancellation or short deadline never counts.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker answers from the fail
	// mode before it lets one probe through (default 500ms). A new leader
	// closes it at once.
	BreakerCooldown time.Duration
}

// Default limits.
const (
	DefaultMaxRecvMsgSize       = 4 << 20
	DefaultMaxConcurrentStreams = 1024
	DefaultMaxRequestItems      = 1000
	DefaultMaxRequestCost       = 1_000_000
	DefaultBreakerFailures      = 3
	DefaultBreakerCooldown      = 500 * time.Millisecond
)

// maxRecvMsgSizeCap keeps a single message well below what the node's
// internal traffic may carry (codec.PeerMaxMsgSize).
const maxRecvMsgSizeCap = 64 << 20

func (l *Limits) setDefaults() {
	if l.MaxRecvMsgSize <= 0 {
		l.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if l.MaxRequestItems <= 0 {
		l.MaxRequestItems = DefaultMaxRequestItems
	}
	if l.MaxRequestCost <= 0 {
		l.MaxRequestCost = DefaultMaxRequestCost
	}
	if l.BreakerFailures <= 0 {
		l.BreakerFailures = DefaultBreakerFailures
	}
	if l.BreakerCooldown <= 0 {
		l.BreakerCooldown = DefaultBreakerCooldown
	}
}

// validate names the flag of the first limit out of range. Zero means the
// default.
func (l *Limits) validate() error {
	switch {
	case l.MaxRecvMsgSize < 0 || (l.MaxRecvMsgSize > 0 && l.MaxRecvMsgSize < 1024) || l.MaxRecvMsgSize > maxRecvMsgSizeCap:
		return fmt.Errorf("%w: --max-recv-msg-size %d must be between 1KiB and %dMiB", ErrConfig, l.MaxRecvMsgSize, maxRecvMsgSizeCap>>20)
	case l.MaxRequestItems < 0 || l.MaxRequestItems > 100_000:
		return fmt.Errorf("%w: --max-request-items %d must be between 1 and 100000", ErrConfig, l.MaxRequestItems)
	case l.MaxRequestCost < 0:
		return fmt.Errorf("%w: --max-request-cost %d must be positive", ErrConfig, l.MaxRequestCost)
	case l.BreakerFailures < 0:
		return fmt.Errorf("%w: --breaker-failures %d must be positive", ErrConfig, l.BreakerFailures)
	case l.BreakerCooldown < 0 || l.BreakerCooldown > time.Minute:
		return fmt.Errorf("%w: --breaker-cooldown %s must be positive and at most 1m", ErrConfig, l.BreakerCooldown)
	}
	return nil
}

// publicBounds are the public port's message bounds.
func (n *Node) publicBounds() codec.Bounds {
	l := &n.cfg.Limits
	return codec.Bounds{Transport: l.MaxRecvMsgSize, Client: l.MaxRecvMsgSize, Items: l.MaxRequestItems, Streams: l.MaxConcurrentStreams}
}

// peerBounds are the peer port's: room for Raft's messages, the client
// bound for the rest.
func (n *Node) peerBounds() codec.Bounds {
	b := n.publicBounds()
	b.Transport = codec.PeerMaxMsgSize
	return b
}
