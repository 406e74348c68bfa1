package security

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrGossipKey prefixes every error about a gossip key.
var ErrGossipKey = errors.New("security: gossip key")

// maxKeyring bounds a keyring: rotation needs two or three keys at a time.
const maxKeyring = 16

// ParseGossipKey decodes a base64 key of 16, 24 or 32 bytes (AES-128,
// -192 or -256), as memberlist's keyring takes.
func ParseGossipKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: not base64: %v", ErrGossipKey, err)
	}
	switch len(k) {
	case 16, 24, 32:
		return k, nil
	}
	return nil, fmt.Errorf("%w: %d bytes, want 16, 24 or 32", ErrGossipKey, len(k))
}

// ParseKeyring reads one base64 key a line, the primary (the one that
// encrypts) first; the others are only accepted. Blank lines and lines
// starting with # are ignored.
func ParseKeyring(b []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if len(keys) == maxKeyring {
			return nil, fmt.Errorf("%w: more than %d keys", ErrGossipKey, maxKeyring)
		}
		k, err := ParseGossipKey(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGossipKey, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: the keyring holds no key", ErrGossipKey)
	}
	return keys, nil
}

// LoadKeyring reads a keyring file (ParseKeyring).
func LoadKeyring(file string) ([][]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: --gossip-keyring: %v", ErrGossipKey, err)
	}
	keys, err := ParseKeyring(b)
	if err != nil {
		return nil, fmt.Errorf("--gossip-keyring %s: %w", file, err)
	}
	return keys, nil
}

// NewGossipKey returns a fresh random 32-byte key, base64.
func NewGossipKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}
