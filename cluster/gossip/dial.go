package gossip

import (
	"context"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"
)

// LocalIP returns the IP of hostport when it names one specific address
// (not a host name, not 0.0.0.0 or ::), else nil.
//
// A node dials its peers from that address. On loopback Linux would
// otherwise pick 127.0.0.1 as the source of every connection, so a node on
// 127.0.0.3 would be seen as 127.0.0.1 by its peers and firewall rules keyed
// on node addresses (the chaos harness's partitions) could not tell nodes
// apart. On a real interface the source is that interface's address anyway.
func LocalIP(hostport string) net.IP {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return nil
	}
	return ip
}

// Dialer returns a dialer whose connections leave from ip (any port),
// or a plain dialer when ip is nil.
func Dialer(ip net.IP) *net.Dialer {
	if ip == nil {
		return &net.Dialer{}
	}
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
}

// GRPCDialer is a gRPC dial option that makes connections leave from ip.
func GRPCDialer(ip net.IP) grpc.DialOption {
	d := Dialer(ip)
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
}

// localNetTransport is memberlist's TCP/UDP transport with its TCP dials
// (push/pull state exchange, fallback probes) made from the bind address.
// Its UDP packets already leave from the bound socket.
type localNetTransport struct {
	*memberlist.NetTransport
	ip net.IP
}

func (t *localNetTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *localNetTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := Dialer(t.ip)
	d.Timeout = timeout
	return d.Dial("tcp", a.Addr)
}
