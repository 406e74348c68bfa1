package shard

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/quorate/quorate/internal/await"
)

// listMachine is a StateMachine that appends each command to a list; its
// snapshot is the list joined by commas.
type listMachine struct {
	mu       sync.Mutex
	items    []string // guarded by mu
	restores int      // guarded by mu
}

func (m *listMachine) Apply(data []byte) any {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(data) == 0 {
		return errors.New("empty")
	}
	m.items = append(m.items, string(data))
	return len(m.items)
}

func (m *listMachine) Snapshot() ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return []byte(strings.Join(m.items, ",")), nil
}

func (m *listMachine) Restore(data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items = strings.Split(string(data), ",")
	m.restores++
	return nil
}

func (m *listMachine) state() ([]string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.items), m.restores
}

// openListGroup opens (or reopens, from dir) a one-replica group over m and
// waits until it leads.
func openListGroup(t *testing.T, dir string, m *listMachine) *Group {
	t.Helper()
	addr := raft.ServerAddress("list")
	_, trans := raft.NewInmemTransport(addr)
	g, err := OpenMachine(GroupConfig{ID: "list", NodeID: "n0", Dir: dir, Transport: trans,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error})}, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bootstrap([]raft.Server{{ID: "n0", Address: addr}}); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the group to lead", g.IsLeader)
	return g
}

// TestOpenMachine runs a StateMachine in a real group: commands reach Apply
// as their bytes and its answers reach the proposer; a snapshot taken
// through raft restores, with the entries after it replayed, when the
// group reopens.
func TestOpenMachine(t *testing.T) {
	dir := t.TempDir()
	m := &listMachine{}
	g := openListGroup(t, dir, m)
	apply := func(cmd string) any {
		t.Helper()
		f := g.Raft().Apply([]byte(cmd), 5*time.Second)
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		return f.Response()
	}
	for i, cmd := range []string{"a", "b", "c"} {
		if got := apply(cmd); got != i+1 {
			t.Fatalf("apply %q answered %v, want %d", cmd, got, i+1)
		}
	}
	if err, ok := apply("").(error); !ok || err.Error() != "empty" {
		t.Fatalf("the machine's error did not reach the proposer: %v", err)
	}
	if err := g.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	apply("d") // after the snapshot: replayed from the log
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}

	again := &listMachine{}
	g = openListGroup(t, dir, again)
	defer g.Close()
	if err := g.Raft().Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	items, restores := again.state()
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(items, want) || restores != 1 {
		t.Fatalf("reopened: %v after %d restores, want %v after one", items, restores, want)
	}
}
