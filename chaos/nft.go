package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// firewall cuts links between node addresses with nftables, in a table of
// its own (inet quorate_chaos_<pid>) so it can never touch anyone else's
// rules, and deletes that table when the run ends however it ends.
type firewall struct {
	table string
}

// newFirewall creates the table and its input chain. The error says why
// nftables cannot be used (not installed, not permitted, ...).
func newFirewall() (*firewall, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, fmt.Errorf("nft not found in PATH")
	}
	f := &firewall{table: fmt.Sprintf("quorate_chaos_%d", os.Getpid())}
	script := fmt.Sprintf("add table inet %s\nadd chain inet %s cut { type filter hook input priority 0; policy accept; }\n",
		f.table, f.table)
	if err := nft(script); err != nil {
		return nil, err
	}
	return f, nil
}

// cut drops every packet between the two groups of addresses, both ways.
// It adds to the cuts already in place; heal removes them all.
func (f *firewall) cut(a, b []string) error {
	var s strings.Builder
	for _, x := range a {
		for _, y := range b {
			fmt.Fprintf(&s, "add rule inet %s cut ip saddr %s ip daddr %s drop\n", f.table, x, y)
			fmt.Fprintf(&s, "add rule inet %s cut ip saddr %s ip daddr %s drop\n", f.table, y, x)
		}
	}
	return nft(s.String())
}

// heal removes every cut.
func (f *firewall) heal() error {
	return nft(fmt.Sprintf("flush chain inet %s cut\n", f.table))
}

// close deletes the table. It is safe to call more than once.
func (f *firewall) close() error {
	if f == nil {
		return nil
	}
	err := nft(fmt.Sprintf("delete table inet %s\n", f.table))
	if err != nil && strings.Contains(err.Error(), "No such file") {
		return nil
	}
	return err
}

// nft runs an nft script from stdin.
func nft(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}
