package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/quorate/quorate/fsm"
)

var units = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
}

// parseRate reads "N/unit": 60/min, 10/5s, 3000/minute, 5/100ms.
func parseRate(s string) (int64, time.Duration, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want N/unit, like 60/min or 10/5s", s)
	}
	n, err := parseCount(strings.TrimSpace(num))
	if err != nil {
		return 0, 0, fmt.Errorf("%q: %w", s, err)
	}
	unit = strings.TrimSpace(unit)
	d, ok := units[strings.ToLower(unit)]
	if !ok {
		d, err = parseDuration(unit)
		if err != nil {
			return 0, 0, fmt.Errorf("%q: unknown unit %q (use s, min, h, d or a duration like 5s)", s, unit)
		}
	}
	return n, d, nil
}

// parseDuration accepts Go durations, and a bare Go unit ("ms") as one of it.
func parseDuration(s string) (time.Duration, error) {
	if s != "" && (s[0] < '0' || s[0] > '9') {
		s = "1" + s
	}
	d, err := time.ParseDuration(s)
	if err == nil && d <= 0 {
		err = fmt.Errorf("not positive")
	}
	return d, err
}

func parseCount(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if _, ferr := strconv.ParseFloat(s, 64); ferr == nil {
			return 0, fmt.Errorf("the count must be a whole number (write 1/2s, not 0.5/s)")
		}
		return 0, fmt.Errorf("the count %q is not a number", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("the count must be positive")
	}
	return n, nil
}

// configLimit maps a Config onto an fsm.Limit and validates it. Errors name
// the config field (relative to the config) they concern.
func configLimit(alg fsm.Algorithm, c *Config) (fsm.Limit, string, error) {
	l := fsm.Limit{Algorithm: alg}
	field, err := configRate(c, &l)
	if err != nil {
		return l, field, err
	}
	if field, err := configBurst(c, &l); err != nil {
		return l, field, err
	}
	if err := l.Validate(); err != nil {
		return l, "", fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "fsm: "))
	}
	return l, "", nil
}

func configRate(c *Config, l *fsm.Limit) (string, error) {
	set := 0
	for _, b := range []bool{c.Rate != "", c.Limit != "", c.RefillPerSec != 0} {
		if b {
			set++
		}
	}
	if set != 1 {
		return "", fmt.Errorf("write exactly one of rate, limit, refill_per_sec")
	}
	var err error
	switch {
	case c.Rate != "":
		l.Limit, l.Period, err = parseRate(c.Rate)
		return "rate", err
	case c.RefillPerSec != 0:
		l.Limit, l.Period, err = perSecond(c.RefillPerSec)
		return "refill_per_sec", err
	case isDigits(string(c.Limit)) || strings.HasPrefix(string(c.Limit), "-"):
		if l.Limit, err = parseCount(string(c.Limit)); err != nil {
			return "limit", fmt.Errorf("%q: %w", c.Limit, err)
		}
		if c.Period == "" {
			return "limit", fmt.Errorf("a bare count needs period (or write %s/min)", c.Limit)
		}
		if l.Period, err = parseDuration(c.Period); err != nil {
			return "period", fmt.Errorf("%q: want a duration like 1m or 5s", c.Period)
		}
		return "", nil
	}
	if c.Period != "" {
		return "period", fmt.Errorf("the limit %q already has a period", c.Limit)
	}
	l.Limit, l.Period, err = parseRate(string(c.Limit))
	return "limit", err
}

// perSecond turns a decimal rate into a whole count per period (0.5 -> 1/2s).
func perSecond(f float64) (int64, time.Duration, error) {
	if !(f > 0) || f > float64(fsm.MaxLimit) {
		return 0, 0, fmt.Errorf("%v: want a positive rate", f)
	}
	if f == math.Trunc(f) {
		return int64(f), time.Second, nil
	}
	n := int64(math.Round(f * 1000))
	if n == 0 {
		return 0, 0, fmt.Errorf("%v: below 0.001 per second; write a rate like 1/h", f)
	}
	g := gcd(n, 1000)
	return n / g, time.Duration(1000/g) * time.Second, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func configBurst(c *Config, l *fsm.Limit) (string, error) {
	if c.Capacity != 0 && c.Burst != 0 {
		return "burst", fmt.Errorf("capacity and burst are the same thing: write one")
	}
	field, b := "capacity", c.Capacity
	if c.Burst != 0 {
		field, b = "burst", c.Burst
	}
	if b < 0 {
		return field, fmt.Errorf("%d: must be positive", b)
	}
	l.Burst = b
	return "", nil
}

// parseAlgorithm reads the file's algorithm names (TOKEN_BUCKET, case-insensitive).
func parseAlgorithm(s string) (fsm.Algorithm, error) {
	a, err := fsm.ParseAlgorithm(strings.ToLower(s))
	if err != nil {
		return 0, fmt.Errorf("unknown algorithm %q (use TOKEN_BUCKET, GCRA, SLIDING_WINDOW, FIXED_WINDOW, SLIDING_LOG, LEAKY_BUCKET_POLICING or LEAKY_BUCKET_SHAPING)", s)
	}
	return a, nil
}
