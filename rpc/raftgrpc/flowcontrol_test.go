package raftgrpc

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// frameCounter is a client connection that counts the HTTP/2 PING frames
// it reads from the server: the server's own (BDP probes) and its
// acknowledgements of the client's.
type frameCounter struct {
	net.Conn
	mu       sync.Mutex
	hdr      []byte // a frame header read in part
	skip     int    // payload bytes of the current frame still to skip
	pings    int    // PINGs the server sent
	pingAcks int    // PING ACKs the server sent
}

func (c *frameCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := p[:n]; len(b) > 0; {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip -= k
			b = b[k:]
			continue
		}
		k := min(9-len(c.hdr), len(b))
		c.hdr = append(c.hdr, b[:k]...)
		b = b[k:]
		if len(c.hdr) < 9 {
			continue
		}
		length := int(binary.BigEndian.Uint32(append([]byte{0}, c.hdr[:3]...)))
		if typ, flags := c.hdr[3], c.hdr[4]; typ == 0x6 { // PING
			if flags&0x1 != 0 {
				c.pingAcks++
			} else {
				c.pings++
			}
		}
		c.hdr, c.skip = c.hdr[:0], length
	}
	return n, err
}

func (c *frameCounter) counts() (pings, acks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pings, c.pingAcks
}

// Heartbeats cost no flow-control PINGs: with gRPC's default dynamic window
// each small message received is answered with a PING (a bandwidth probe)
// and its ACK. Manager's connections and a server with ServerOptions use
// static windows. The default server is checked too, to show the counter
// sees the probes.
func TestHeartbeatsSendNoPings(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []grpc.ServerOption
		probesSeen bool // the server probes
	}{
		{"ServerOptions", ServerOptions(), false},
		{"default server", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer(tc.opts...)
			peerAddr := raft.ServerAddress(lis.Addr().String())
			peer := NewManager(peerAddr)
			peer.Register(srv)
			served := make(chan struct{})
			go func() {
				defer close(served)
				_ = srv.Serve(lis)
			}()
			defer func() {
				_ = peer.Close()
				srv.Stop()
				<-served
			}()

			var conn *frameCounter
			sender := NewManager("127.0.0.1:1",
				grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
					if err != nil {
						return nil, err
					}
					conn = &frameCounter{Conn: c}
					return conn, nil
				}))
			defer func() { _ = sender.Close() }()
			sender.hbWindow = 0

			recv, err := peer.Transport("g")
			if err != nil {
				t.Fatal(err)
			}
			recv.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil) })
			send, err := sender.Transport("g")
			if err != nil {
				t.Fatal(err)
			}
			const n = 100
			hb := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("s"), Addr: []byte("127.0.0.1:1")}, Term: 1}
			for i := range n {
				if err := send.AppendEntries("p", peerAddr, hb, &raft.AppendEntriesResponse{}); err != nil {
					t.Fatalf("heartbeat %d: %v", i, err)
				}
			}
			if got := sender.hbAnswered.Load(); got != n {
				t.Fatalf("%d heartbeats answered on the stream, want %d", got, n)
			}
			pings, acks := conn.counts()
			t.Logf("%d heartbeats: the server sent %d PINGs and %d PING ACKs", n, pings, acks)
			if acks != 0 {
				t.Errorf("the client probed the server %d times: its window is not static", acks)
			}
			if probed := pings > 0; probed != tc.probesSeen {
				t.Errorf("server sent %d PINGs, want probes: %v", pings, tc.probesSeen)
			}
		})
	}
}
