package topk

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Defaults and bounds of a Config.
const (
	DefaultK           = 64
	DefaultMaxPolicies = 1000
	// MaxWindows and MaxSlots bound a tracker's memory per policy.
	MaxWindows = 8
	MaxSlots   = 60
	// MinSlot is the shortest slot: a window is rotated at most this often.
	MinSlot = time.Millisecond
)

// Config sizes a Tracker. Zero fields take their defaults.
type Config struct {
	// K is the counters of each sketch (default 64): counts are off by at
	// most 1/K of the window's observations.
	K int
	// MaxPolicies is how many policies are tracked at once (default 1000,
	// at most MaxWireSummaries).
	MaxPolicies int
	// Windows are the windows Top answers for (default DefaultWindows).
	// Sorted by length, each window's slot must be a multiple of the
	// previous one's: a window's slots are built from the shorter's.
	Windows []Window
}

// Window is a sliding window of Length, cut into Slots equal slots.
type Window struct {
	Length time.Duration
	Slots  int
}

// DefaultWindows are 1m, 5m, 15m and 1h, each of 6 slots.
func DefaultWindows() []Window {
	return []Window{{time.Minute, 6}, {5 * time.Minute, 6}, {15 * time.Minute, 6}, {time.Hour, 6}}
}

// withDefaults validates c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	if c.K == 0 {
		c.K = DefaultK
	}
	if c.MaxPolicies == 0 {
		c.MaxPolicies = DefaultMaxPolicies
	}
	if c.Windows == nil {
		c.Windows = DefaultWindows()
	}
	switch {
	case c.K < 1 || c.K > MaxK:
		return c, configErr("K is %d, want 1..%d", c.K, MaxK)
	case c.MaxPolicies < 1 || c.MaxPolicies > MaxWireSummaries:
		return c, configErr("MaxPolicies is %d, want 1..%d", c.MaxPolicies, MaxWireSummaries)
	case len(c.Windows) < 1 || len(c.Windows) > MaxWindows:
		return c, configErr("Windows has %d, want 1..%d", len(c.Windows), MaxWindows)
	}
	if err := validateWindows(c.Windows); err != nil {
		return c, err
	}
	c.Windows = slices.Clone(c.Windows) // the caller's slice stays the caller's
	slices.SortFunc(c.Windows, func(a, b Window) int { return cmp.Compare(a.Length, b.Length) })
	return c, validateCascade(c.Windows)
}

// validateCascade checks that, shortest first, each window's slot is a
// multiple of the one before.
func validateCascade(sorted []Window) error {
	for i := 1; i < len(sorted); i++ {
		prev, w := sorted[i-1].slot(), sorted[i].slot()
		if w%prev != 0 {
			return configErr("Windows: the %s window's slot (%s) is not a multiple of the %s window's (%s)",
				sorted[i].Length, w, sorted[i-1].Length, prev)
		}
	}
	return nil
}

func (w Window) slot() time.Duration { return w.Length / time.Duration(w.Slots) }

func validateWindows(ws []Window) error {
	for i, w := range ws {
		switch {
		case w.Slots < 1 || w.Slots > MaxSlots:
			return configErr("Windows[%d].Slots is %d, want 1..%d", i, w.Slots, MaxSlots)
		case w.Length < MinSlot*time.Duration(w.Slots):
			return configErr("Windows[%d].Length is %s, want at least %s for %d slots", i, w.Length, MinSlot*time.Duration(w.Slots), w.Slots)
		case w.Length%time.Duration(w.Slots) != 0:
			return configErr("Windows[%d].Length %s does not divide into %d equal slots", i, w.Length, w.Slots)
		}
		for j := range i {
			if ws[j].Length == w.Length {
				return configErr("Windows[%d].Length %s is also Windows[%d]'s", i, w.Length, j)
			}
		}
	}
	return nil
}

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}
