package gossip

import (
	"context"
	"net"
	"testing"
	"time"
)

func TestLocalIP(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{
		{"127.0.0.3:7400", "127.0.0.3"},
		{"[::1]:7400", "::1"},
		{"0.0.0.0:7400", ""}, // any address: the kernel picks the source
		{"[::]:7400", ""},
		{"localhost:7400", ""}, // a name: no binding
		{"no-port", ""},
	} {
		got := LocalIP(c.in)
		if (got == nil && c.want != "") || (got != nil && got.String() != c.want) {
			t.Errorf("LocalIP(%q) = %v, want %q", c.in, got, c.want)
		}
	}
}

// A connection from a loopback node address other than 127.0.0.1 must
// arrive from that address, or firewall rules keyed on node addresses
// could not tell nodes apart.
func TestDialersLeaveFromTheNodeAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	from := net.ParseIP("127.0.0.3")
	accepted := make(chan net.Addr, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c.RemoteAddr()
			c.Close()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dialer(from).DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	tr := &localNetTransport{ip: from}
	c, err = tr.DialTimeout(l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for range 2 {
		if a := (<-accepted).(*net.TCPAddr); !a.IP.Equal(from) {
			t.Errorf("connection arrived from %v, want %v", a.IP, from)
		}
	}
}
