// Package proccpu measures the CPU time processes use during a run, from
// /proc/<pid>/stat, so that quorate bench can quote throughput per core of
// each server process and of the tool itself: on a shared machine, requests
// per second alone say little. It also finds which local process listens on
// a TCP port, for targets given by address.
//
// It is Linux only; elsewhere every reading fails with ErrUnsupported and
// the report says CPU was not measured.
package proccpu

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Errors of this package.
var (
	// ErrUnsupported: the system has no /proc to read.
	ErrUnsupported = errors.New("proccpu: /proc is not available on this system")
	// ErrFormat: a /proc file did not have the expected form.
	ErrFormat = errors.New("proccpu: unexpected /proc format")
)

// userHZ is the unit of the times in /proc/<pid>/stat. The kernel's ABI
// fixes USER_HZ at 100 on every architecture Go supports; reading it with
// sysconf(_SC_CLK_TCK) would need cgo for a constant. A reading is thus
// exact to 10ms per process, 0.2% of a core over a five-second run.
const userHZ = 100

// procRoot is /proc; tests point it elsewhere.
var procRoot = "/proc"

// Process is a process to meter.
type Process struct {
	// Name labels the process in reports ("n1", "redis-server:4242").
	Name string
	PID  int
}

// CPUTime returns the user plus system CPU time pid has used so far, all
// its threads together (children not included).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		if _, serr := os.Stat(procRoot); serr != nil {
			return 0, ErrUnsupported
		}
		return 0, fmt.Errorf("proccpu: pid %d: %w", pid, err)
	}
	return parseStat(string(b))
}

// parseStat reads utime and stime (fields 14 and 15) of a stat line. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so fields are counted from the last ')'.
func parseStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, ErrFormat
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), so utime is f[11] and stime f[12].
	if len(f) < 13 {
		return 0, ErrFormat
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, ErrFormat
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// Comm returns pid's command name, or "" if it cannot be read.
func Comm(pid int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Usage is the CPU one process used over a metered interval.
type Usage struct {
	Process
	CPU  time.Duration // CPU time used
	Wall time.Duration // length of the interval
	// Err is why the process could not be metered (it exited, or /proc is
	// not readable); CPU is then 0.
	Err error
}

// Cores is the average number of cores the process kept busy.
func (u Usage) Cores() float64 {
	if u.Wall <= 0 || u.Err != nil {
		return 0
	}
	return u.CPU.Seconds() / u.Wall.Seconds()
}

// Meter measures processes between Start and Stop.
type Meter struct {
	procs []Process
	start []time.Duration
	errs  []error
	t0    time.Time
}

// Start takes the first reading of every process.
func Start(procs []Process) *Meter {
	m := &Meter{procs: procs, start: make([]time.Duration, len(procs)), errs: make([]error, len(procs))}
	for i, p := range procs {
		m.start[i], m.errs[i] = CPUTime(p.PID)
	}
	m.t0 = time.Now()
	return m
}

// Stop takes the second reading and returns each process's usage, in the
// order given to Start.
func (m *Meter) Stop() []Usage {
	wall := time.Since(m.t0)
	out := make([]Usage, len(m.procs))
	for i, p := range m.procs {
		out[i] = Usage{Process: p, Wall: wall, Err: m.errs[i]}
		if out[i].Err != nil {
			continue
		}
		end, err := CPUTime(p.PID)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].CPU = end - m.start[i]
	}
	return out
}

// ListenerPIDs finds the local processes listening on the given TCP ports:
// it reads the listening sockets' inodes from /proc/net/tcp and tcp6, then
// looks for them among every process's open files. It returns port → pid
// for the ports it found; reading other users' /proc/<pid>/fd needs root
// (or the same user), so a port may go unfound.
func ListenerPIDs(ports []int) (map[int]int, error) {
	want := map[int]bool{}
	for _, p := range ports {
		want[p] = true
	}
	inodes := map[string]int{} // socket inode → port
	var read bool
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(procRoot, f))
		if err != nil {
			continue
		}
		read = true
		for port, inode := range parseListeners(string(b)) {
			if want[port] {
				inodes[inode] = port
			}
		}
	}
	if !read {
		return nil, ErrUnsupported
	}
	found := map[int]int{}
	if len(inodes) == 0 {
		return found, nil
	}
	dirs, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, ErrUnsupported
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join(procRoot, d.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			inode, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			if port, ok := inodes[strings.TrimSuffix(inode, "]")]; ok {
				found[port] = pid
			}
		}
	}
	return found, nil
}

// parseListeners returns port → socket inode of the listening sockets in a
// /proc/net/tcp table:
//
//	sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
//	0: 0100007F:1CE9 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 12345 ...
func parseListeners(table string) map[int]string {
	const listen = "0A"
	out := map[int]string{}
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != listen {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			continue
		}
		out[int(port)] = f[9]
	}
	return out
}

// IsLocal reports whether host (a name or an address) is this machine: a
// loopback address, one of its interfaces' addresses, or a name resolving
// to one. Only local servers can be metered.
func IsLocal(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		addrs, err := net.LookupIP(host)
		if err != nil {
			return false
		}
		ips = addrs
	}
	ifAddrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range ifAddrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
