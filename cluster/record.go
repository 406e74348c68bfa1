package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/quorate/quorate/cluster/meta"
)

// The node's copy of the cluster record (meta.Record), in its data dir:
// what lets it reopen its groups before gossip finds anyone. The meta
// package stays free of I/O; where the node keeps its files is the node's.
const recordFile = "cluster.json"

func loadRecord(dir string) (*meta.Record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r meta.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("cluster: reading %s: %w", recordFile, err)
	}
	return &r, r.Validate()
}

// saveRecord writes the record atomically: a temporary file, fsync, rename.
func saveRecord(dir string, r *meta.Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, recordFile))
}
