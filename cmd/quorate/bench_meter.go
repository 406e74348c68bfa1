package main

// What a bench run meters beside the load: the server processes whose CPU
// it reports, and the nodes whose /metrics say how long they took to
// decide.

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/bench/proccpu"
	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// serverProcs finds the processes to meter for a cluster given by address:
// the --pids given, or the local processes listening on the addresses'
// ports. The note says what could not be metered.
func serverProcs(addrs []string, pids []int) ([]proccpu.Process, string) {
	if len(pids) > 0 {
		var out []proccpu.Process
		for _, pid := range pids {
			out = append(out, proccpu.Process{Name: procName(pid), PID: pid})
		}
		return out, ""
	}
	return listeners(addrs, "server")
}

// metricsAddrs asks the cluster (Admin.Status) for the HTTP addresses of
// the nodes at addrs, whose /metrics tell how long the nodes took to decide.
// A node started on an unspecified host (--http :7501 or 0.0.0.0:7501) is
// reached on the host it was given by in addrs.
func metricsAddrs(ctx context.Context, addrs []string, opts []grpc.DialOption) ([]string, error) {
	var nodes []*quoratev1.NodeStatus
	var lastErr error
	for _, addr := range addrs {
		st, err := nodeStatus(ctx, addr, opts)
		if err == nil {
			nodes = st.GetNodes()
			break
		}
		lastErr = err
	}
	if nodes == nil && lastErr != nil {
		return nil, fmt.Errorf("cluster status: %w", lastErr)
	}
	var out []string
	for _, addr := range addrs {
		h, err := httpAddrOf(nodes, addr)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// httpAddrOf finds the node whose RPC address is addr and returns its HTTP
// address, with addr's host where the node's is unspecified.
func httpAddrOf(nodes []*quoratev1.NodeStatus, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%s: %w", addr, err)
	}
	for _, n := range nodes {
		nh, np, err := net.SplitHostPort(n.GetRpcAddr())
		if err != nil || np != port || (nh != host && !unspecified(nh)) {
			continue
		}
		if n.GetHttpAddr() == "" {
			return "", fmt.Errorf("the cluster's status gives no HTTP address for %s (a node older than this tool?)", addr)
		}
		hh, hp, err := net.SplitHostPort(n.GetHttpAddr())
		if err != nil {
			return "", fmt.Errorf("node %s: HTTP address %q: %w", n.GetId(), n.GetHttpAddr(), err)
		}
		if unspecified(hh) {
			hh = host
		}
		return net.JoinHostPort(hh, hp), nil
	}
	return "", fmt.Errorf("%s is not a node's RPC address in the cluster's status (give the addresses the nodes were started with)", addr)
}

func unspecified(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// nodeStatus asks the node at addr for the cluster's status, waiting at
// most 2s, so one unreachable node does not use up the others' time.
func nodeStatus(ctx context.Context, addr string, opts []grpc.DialOption) (*quoratev1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := client.Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status(ctx)
}

// baselineServer finds the local Redis process listening at the URL.
func baselineServer(rawURL string) ([]proccpu.Process, string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "baseline address not understood"
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	return listeners([]string{host}, "baseline")
}

// listeners finds the local processes listening on the ports of addrs.
func listeners(addrs []string, what string) ([]proccpu.Process, string) {
	var ports []int
	for _, a := range addrs {
		host, p, err := net.SplitHostPort(a)
		if err != nil || !proccpu.IsLocal(host) {
			continue
		}
		if port, err := strconv.Atoi(p); err == nil {
			ports = append(ports, port)
		}
	}
	none := fmt.Sprintf("%s processes not found on this machine (remote, or their /proc/<pid>/fd not readable; give --pids): only this tool's CPU is reported", what)
	if len(ports) == 0 {
		return nil, none
	}
	found, err := proccpu.ListenerPIDs(ports)
	if err != nil || len(found) == 0 {
		return nil, none
	}
	var out []proccpu.Process
	seen := map[int]bool{}
	for _, port := range ports {
		pid, ok := found[port]
		if !ok || seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, proccpu.Process{Name: procName(pid), PID: pid})
	}
	note := ""
	if len(found) < len(ports) {
		note = fmt.Sprintf("found %d of %d %s processes by port; the others are not metered", len(found), len(ports), what)
	}
	return out, note
}

func procName(pid int) string {
	if comm := proccpu.Comm(pid); comm != "" {
		return comm + ":" + strconv.Itoa(pid)
	}
	return "pid:" + strconv.Itoa(pid)
}
