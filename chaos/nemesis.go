package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds. A leader-targeted kind picks the node that leads a shard
// chosen by the schedule, when the fault starts.
const (
	KillNode        Kind = "kill"             // SIGKILL a node, restart it on its data
	KillLeader      Kind = "kill-leader"      // the same, to a shard's leader
	PauseNode       Kind = "pause"            // SIGSTOP beyond the election timeout, then SIGCONT
	PauseLeader     Kind = "pause-leader"     // the same, to a shard's leader
	PartitionHalves Kind = "partition-halves" // a minority cut off from the majority
	PartitionLeader Kind = "partition-leader" // a shard's leader cut off from everyone
	PartitionBridge Kind = "partition-bridge" // two sides that only one node connects
	ClockSkew       Kind = "clock-skew"       // restart a node with --debug-clock-offset
	// Membership is scheduled; it is recorded as the four changes it makes
	// (membership.go): a spare joins, a shard splits, a node is replaced
	// and rejoins, the spare leaves.
	Membership Kind = "membership"
	Join       Kind = "member-join"
	Split      Kind = "shard-split"
	Replace    Kind = "member-replace"
	Leave      Kind = "member-leave"
)

func (k Kind) partition() bool { return strings.HasPrefix(string(k), "partition") }

// planned is one fault of the schedule: everything random about it is
// drawn from the seed before the run starts.
type planned struct {
	Kind   Kind
	Wait   time.Duration // quiet time before it starts
	Hold   time.Duration // how long it lasts
	Shard  int           // for leader-targeted kinds
	Perm   []int         // a random order of the nodes: targets are taken from it
	Offset time.Duration // for ClockSkew
	Minor  int           // for PartitionHalves: size of the minority
}

// plan draws the schedule of faults for a run of the given length. The
// first three faults are a kill, a pause and a partition, in an order the
// seed decides, so even a short run has each; then a membership change;
// then a clock skew; then any.
func plan(seed uint64, nodes, shards int, length, interval time.Duration) []planned {
	r := rand.New(rand.NewPCG(seed, 0x6368616f73)) // "chaos"
	kills := []Kind{KillNode, KillLeader}
	pauses := []Kind{PauseNode, PauseLeader}
	parts := []Kind{PartitionHalves, PartitionLeader, PartitionBridge}
	first := [][]Kind{kills, pauses, parts}
	r.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	first = append(first, []Kind{Membership}, []Kind{ClockSkew})
	all := append(append(append(append([]Kind{}, kills...), pauses...), parts...), ClockSkew, Membership)

	var out []planned
	var used time.Duration
	for i := 0; ; i++ {
		kinds := all
		if i < len(first) {
			kinds = first[i]
		}
		p := planned{
			Kind:  kinds[r.IntN(len(kinds))],
			Wait:  interval/2 + time.Duration(r.Int64N(int64(interval)+1)), // mean: interval
			Shard: r.IntN(shards),
			Perm:  r.Perm(nodes),
			Minor: 1 + r.IntN((nodes-1)/2),
		}
		p.Hold = holdFor(p.Kind, r)
		if p.Kind == ClockSkew {
			p.Offset = time.Duration(2+r.IntN(29)) * time.Second
			if r.IntN(2) == 0 {
				p.Offset = -p.Offset
			}
		}
		used += p.Wait + p.Hold
		if used > length {
			return out
		}
		out = append(out, p)
	}
}

// holdFor draws how long a fault lasts, within holdBounds.
func holdFor(k Kind, r *rand.Rand) time.Duration {
	lo, hi := holdBounds(k)
	if lo == hi {
		return lo
	}
	ms := func(d time.Duration) int { return int(d / time.Millisecond) }
	return time.Duration(ms(lo)+r.IntN(ms(hi)-ms(lo)+1)) * time.Millisecond
}

// holdBounds is the range of how long a fault of kind k lasts. Pauses
// outlast Raft's 1s election timeout so that the paused leader is deposed
// while it sleeps.
func holdBounds(k Kind) (lo, hi time.Duration) {
	switch k {
	case KillNode, KillLeader:
		return time.Second, 6 * time.Second
	case PauseNode, PauseLeader:
		return 2 * time.Second, 6 * time.Second
	case ClockSkew:
		return 4 * time.Second, 10 * time.Second
	case Membership:
		// Not a hold but what the changes take, for the schedule: each
		// waits for the moves they cause.
		return 45 * time.Second, 45 * time.Second
	default:
		return 3 * time.Second, 10 * time.Second
	}
}

// Fault is a fault as it happened, for the report.
type Fault struct {
	Kind   Kind      `json:"kind"`
	Target string    `json:"target"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	// Offset is the clock offset of a ClockSkew.
	Offset time.Duration `json:"offset,omitempty"`
	// Note says why a fault was skipped or what went wrong healing it.
	Note string `json:"note,omitempty"`
}

// nemesis injects a schedule of faults into a cluster, one at a time, and
// records them. Faults are sequential, so at most one node is down, paused
// or isolated at once and a majority can always make progress.
type nemesis struct {
	c  *cluster
	fw *firewall // nil: partitions disabled
	lg func(format string, args ...any)
	// keyShard returns the shard that last decided strict key i, if any,
	// and the key's hash: a split fault splits that shard at that hash,
	// so that a checked key moves.
	keyShard func(i int) (shard int, hash uint64, ok bool)

	mu     sync.Mutex
	faults []Fault // guarded by mu
}

func (n *nemesis) record(f Fault) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = append(n.faults, f)
}

func (n *nemesis) history() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Fault(nil), n.faults...)
}

// run injects the schedule until it ends, ctx is done, or the next fault
// would not be over by until (restarts make the run drift from the plan),
// healing each fault before the next. A fault that could not heal in time
// (a restarted node not ready) is an error: the cluster is then not what
// the run assumes.
func (n *nemesis) run(ctx context.Context, schedule []planned, until time.Time) error {
	for _, p := range schedule {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.Wait):
		}
		if time.Now().Add(p.Hold).After(until) {
			return nil
		}
		if p.Kind == Membership {
			// Like a restart, a membership change is seen through once begun.
			if err := n.membership(context.WithoutCancel(ctx), p); err != nil {
				return err
			}
			continue
		}
		f, err := n.inject(ctx, p)
		n.record(f)
		n.lg("fault %-17s %-28s %s..%s %s", f.Kind, f.Target, f.Start.Format("15:04:05.000"),
			f.End.Format("15:04:05.000"), f.Note)
		if err != nil {
			return err
		}
	}
	return nil
}

// inject applies one fault for its hold time and heals it.
func (n *nemesis) inject(ctx context.Context, p planned) (Fault, error) {
	f := Fault{Kind: p.Kind, Start: time.Now()}
	if p.Kind.partition() && n.fw == nil {
		f.Note, f.End = "skipped: partitions disabled", f.Start
		return f, nil
	}
	target := p.Perm[0]
	if p.Kind == KillLeader || p.Kind == PauseLeader || p.Kind == PartitionLeader {
		if l, err := n.c.shardLeader(ctx, p.Shard); err == nil {
			target = l
			f.Target = fmt.Sprintf("leader of shard %d: ", p.Shard)
		} else {
			f.Target = fmt.Sprintf("(shard %d leader unknown) ", p.Shard)
		}
	}
	id := n.c.agents[target].id
	hold := func() {
		select {
		case <-ctx.Done():
		case <-time.After(p.Hold):
		}
	}
	var err error
	switch p.Kind {
	case KillNode, KillLeader:
		f.Target += id
		n.c.kill(target)
		hold()
		f.End = time.Now()
		err = n.restart(ctx, target)
	case PauseNode, PauseLeader:
		f.Target += id
		if err = n.c.pause(target); err == nil {
			hold()
			err = n.c.resume(target)
		}
		f.End = time.Now()
	case ClockSkew:
		f.Target, f.Offset = id, p.Offset
		n.c.kill(target)
		n.c.setClockOffset(target, p.Offset)
		if err = n.restart(ctx, target); err == nil {
			hold()
			n.c.kill(target)
			n.c.setClockOffset(target, 0)
			err = n.restart(ctx, target)
		}
		f.End = time.Now()
	default:
		a, b := n.sides(p, target)
		f.Target = n.names(a) + " | " + n.names(b)
		if p.Kind == PartitionBridge {
			f.Target += " (bridge " + n.c.agents[p.Perm[0]].id + ")"
		}
		if err = n.fw.cut(n.addrs(a), n.addrs(b)); err == nil {
			hold()
		}
		if herr := n.fw.heal(); err == nil {
			err = herr
		}
		f.End = time.Now()
	}
	if err != nil {
		f.Note = err.Error()
	}
	return f, err
}

// restartTimeout bounds the wait for a restarted node to be ready.
const restartTimeout = 60 * time.Second

// restart starts node i again and waits until it is ready.
func (n *nemesis) restart(ctx context.Context, i int) error {
	if err := n.c.start(i); err != nil {
		return err
	}
	return n.c.waitReady(context.WithoutCancel(ctx), restartTimeout, i)
}

// sides returns the two groups a partition cuts apart.
func (n *nemesis) sides(p planned, leader int) (a, b []int) {
	switch p.Kind {
	case PartitionLeader:
		for i := range n.c.agents {
			if i != leader {
				b = append(b, i)
			}
		}
		return []int{leader}, b
	case PartitionBridge:
		// Perm[0] is the bridge, connected to both sides.
		rest := p.Perm[1:]
		return rest[:len(rest)/2], rest[len(rest)/2:]
	default:
		return p.Perm[:p.Minor], p.Perm[p.Minor:]
	}
}

func (n *nemesis) names(idx []int) string {
	s := make([]string, len(idx))
	for i, j := range idx {
		s[i] = n.c.agents[j].id
	}
	return strings.Join(s, ",")
}

func (n *nemesis) addrs(idx []int) []string {
	s := make([]string, len(idx))
	for i, j := range idx {
		s[i] = n.c.agents[j].ip
	}
	return s
}
