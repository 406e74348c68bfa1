package proccpu

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses: fields count from
	// the last ')'. utime 250 and stime 50 ticks are 3s at USER_HZ 100.
	line := "4242 (we ird) (name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 12345 100000 500 18446744073709551615"
	got, err := parseStat(line)
	if err != nil || got != 3*time.Second {
		t.Errorf("parseStat = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "4242 no parens", "1 (x) S 1 2"} {
		if _, err := parseStat(bad); !errors.Is(err, ErrFormat) {
			t.Errorf("parseStat(%q): %v; want ErrFormat", bad, err)
		}
	}
}

func TestParseListeners(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1CE9 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 11111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1CEA 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 22222 1 0000000000000000 20 4 30 10 -1
   2: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 33333 1 0000000000000000 100 0 0 10 0
`
	got := parseListeners(table)
	// 0x1CE9 = 7401 and 0x18EB = 6379 listen; 7402 is an established
	// connection, not a listener.
	if len(got) != 2 || got[7401] != "11111" || got[6379] != "33333" {
		t.Errorf("parseListeners = %v", got)
	}
}

func TestListenerPIDsFindsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux only")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	found, err := ListenerPIDs([]int{port, 1})
	if err != nil {
		t.Fatal(err)
	}
	if found[port] != os.Getpid() {
		t.Errorf("port %d: pid %d; want this process, %d", port, found[port], os.Getpid())
	}
	if _, ok := found[1]; ok {
		t.Errorf("port 1 found: %v", found)
	}
}

func TestMeterSeesBusyCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux only")
	}
	m := Start([]Process{{Name: "self", PID: os.Getpid()}, {Name: "gone", PID: 1 << 30}})
	// Spin until this process has used 200ms of CPU: on a busy machine that
	// may take longer than 200ms of wall time, so bound it by CPU, not time.
	// A busy loop, not a wait: the CPU it burns is what is measured.
	start, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if now, _ := CPUTime(os.Getpid()); now-start >= 200*time.Millisecond {
			break
		}
	}
	u := m.Stop()
	if u[0].Err != nil || u[0].CPU < 200*time.Millisecond || u[0].Cores() <= 0 || u[0].Cores() > float64(runtime.NumCPU())+0.1 {
		t.Errorf("busy loop: %+v, %.2f cores; want at least 200ms of CPU", u[0], u[0].Cores())
	}
	if u[1].Err == nil || u[1].Cores() != 0 {
		t.Errorf("missing process: %+v; want an error and no cores", u[1])
	}
}

func TestUnsupported(t *testing.T) {
	old := procRoot
	procRoot = filepath.Join(t.TempDir(), "no-proc")
	defer func() { procRoot = old }()
	if _, err := CPUTime(1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("CPUTime without /proc: %v", err)
	}
	if _, err := ListenerPIDs([]int{1}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ListenerPIDs without /proc: %v", err)
	}
}

func TestIsLocal(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "0.0.0.0": true, "192.0.2.1": false} {
		if got := IsLocal(host); got != want {
			t.Errorf("IsLocal(%s) = %v; want %v", host, got, want)
		}
	}
}
