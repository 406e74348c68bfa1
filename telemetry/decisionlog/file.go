package decisionlog

import (
	"context"
	"os"
	"path/filepath"

	"gopkg.in/natefinch/lumberjack.v2"
)

// FileConfig is a rotating file: when the file would pass MaxSizeMB it is
// renamed with its time (decisions-2026-03-01T03-12-00.000.jsonl) and a new
// one begins; at most MaxFiles old files are kept.
type FileConfig struct {
	Path       string
	MaxSizeMB  int  // default 100
	MaxFiles   int  // old files kept, at least 1; default 5
	MaxAgeDays int  // old files older than this are removed too; 0 keeps them
	Compress   bool // gzip old files
}

// Limits of a FileConfig.
const (
	DefaultFileMaxSizeMB = 100
	DefaultFileMaxFiles  = 5
	maxFileSizeMB        = 1 << 20 // a terabyte
	maxFiles             = 10000
)

// FileSink writes lines to a rotating file (lumberjack).
type FileSink struct {
	lj *lumberjack.Logger
}

// NewFileSink checks c and that the file can be opened for appending.
func NewFileSink(c FileConfig) (*FileSink, error) {
	if err := c.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err != nil {
		return nil, configErr("file sink path %q: %v", c.Path, err)
	}
	f, err := os.OpenFile(c.Path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, configErr("file sink path %q: %v", c.Path, err)
	}
	if err := f.Close(); err != nil {
		return nil, configErr("file sink path %q: %v", c.Path, err)
	}
	return &FileSink{lj: &lumberjack.Logger{
		Filename:   c.Path,
		MaxSize:    c.MaxSizeMB,
		MaxBackups: c.MaxFiles,
		MaxAge:     c.MaxAgeDays,
		Compress:   c.Compress,
	}}, nil
}

func (c *FileConfig) fill() error {
	switch {
	case c.Path == "":
		return configErr("file sink: empty path")
	case c.MaxSizeMB < 0 || c.MaxSizeMB > maxFileSizeMB:
		return configErr("file sink max_size_mb %d is not between 1 and %d", c.MaxSizeMB, maxFileSizeMB)
	case c.MaxFiles < 0 || c.MaxFiles > maxFiles:
		// lumberjack keeps every old file when told 0: not bounded.
		return configErr("file sink max_files %d is not between 1 and %d", c.MaxFiles, maxFiles)
	case c.MaxAgeDays < 0:
		return configErr("file sink max_age_days %d is negative", c.MaxAgeDays)
	}
	if c.MaxSizeMB == 0 {
		c.MaxSizeMB = DefaultFileMaxSizeMB
	}
	if c.MaxFiles == 0 {
		c.MaxFiles = DefaultFileMaxFiles
	}
	return nil
}

// Name implements Sink.
func (s *FileSink) Name() string { return "file" }

// Batching implements Sink: up to 256 KiB a write (well under the
// smallest file, as lumberjack refuses a write longer than a file), at
// least every FlushInterval: a write per line costs a check's worth of
// CPU at a few thousand lines a second.
func (s *FileSink) Batching() Batching {
	return Batching{MaxRecords: 4096, MaxBytes: 256 << 10, Interval: FlushInterval}
}

// Write implements Sink.
func (s *FileSink) Write(_ context.Context, batch []byte) error {
	_, err := s.lj.Write(batch)
	return err
}

// Close implements Sink. lumberjack's goroutine that compresses and removes
// old files outlives it (lumberjack has no way to stop it).
func (s *FileSink) Close() error { return s.lj.Close() }
