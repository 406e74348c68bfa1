package progress

import (
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/bench"
)

func TestRatesOverTheLastSecond(t *testing.T) {
	r := &rates{}
	t0 := time.Unix(100, 0)
	// 1000 requests (10 checks each) a second for two seconds, sampled
	// every 200ms; then nothing for a second: the rate must fall to 0, not
	// average over the whole run.
	var req int64
	for i := 0; i <= 10; i++ {
		r.sample(t0.Add(time.Duration(i)*200*time.Millisecond), req, 10*req, 0)
		req += 200
	}
	if got := r.String(); !strings.Contains(got, "1000 req/s") || !strings.Contains(got, "10000 checks/s") {
		t.Errorf("steady: %q", got)
	}
	req -= 200
	for i := 11; i <= 16; i++ {
		r.sample(t0.Add(time.Duration(i)*200*time.Millisecond), req, 10*req, 0)
	}
	if got := r.String(); !strings.Contains(got, "   0 req/s") {
		t.Errorf("stopped: %q", got)
	}
}

func TestPlainOutputAndQuiet(t *testing.T) {
	var b strings.Builder
	d := New(&b, false) // not a terminal: one line per run
	live := &bench.Live{}
	done := d.Track("quorate strict", bench.Load{Duration: time.Second}, live)
	done()
	d.Printf("hello %d\n", 1)
	if out := b.String(); !strings.HasPrefix(out, "quorate strict: 0 requests") || !strings.Contains(out, "hello 1") {
		t.Errorf("output %q", out)
	}
	b.Reset()
	q := New(&b, true)
	q.Track("x", bench.Load{Duration: time.Second}, live)()
	q.Printf("nothing\n")
	if b.Len() != 0 {
		t.Errorf("quiet wrote %q", b.String())
	}
}
