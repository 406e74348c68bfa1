package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/quorate/quorate/bench/accuracy"
)

// Distribution is how a workload picks the buckets of its requests.
type Distribution string

// The distributions.
const (
	// Uniform picks each item's key uniformly among Keys keys: load spread
	// over every shard, few denials at a modest rate.
	Uniform Distribution = "uniform"
	// Zipf picks keys with Zipf-skewed popularity (exponent ZipfS): a few
	// hot tenants and a long tail, as real traffic is.
	Zipf Distribution = "zipf"
	// Hot sends every item to one key: one bucket, one shard, demand far
	// above the limit, the hardest case for admission accuracy.
	Hot Distribution = "hot"
	// Mix is a multi-tenant mix: Keys tenants in three tiers (1% of tenants
	// send 50% of requests, 9% send 30%, the other 90% send 20%), and every
	// item of a request is one of that tenant's limits (item j of tenant t
	// is key "t<t>/l<j>"), as a gateway checks a tenant's several limits.
	Mix Distribution = "mix"
)

// Distributions lists the distributions, for flag help.
var Distributions = []Distribution{Uniform, Zipf, Hot, Mix}

// DefaultZipfS is the Zipf exponent when none is given: the top 1% of
// 10,000 keys get about half the traffic.
const DefaultZipfS = 1.1

// Workload is what the requests of a run look like.
type Workload struct {
	Distribution Distribution
	// Keys is the number of distinct keys (Uniform, Zipf) or tenants (Mix).
	// Hot ignores it.
	Keys int
	// Items is the number of limits checked per request (1 for unary
	// requests, 10 or 100 for batched ones).
	Items int
	// Cost is the units each item takes.
	Cost int64
	// Limit applies to every item.
	Limit Limit
	// ZipfS is the Zipf exponent, above 1 (0 means DefaultZipfS).
	ZipfS float64
}

// Validate reports the first problem with w.
func (w Workload) Validate() error {
	switch w.Distribution {
	case Uniform, Zipf, Hot, Mix:
	default:
		return fmt.Errorf("distribution %q: want uniform, zipf, hot or mix", w.Distribution)
	}
	if w.Distribution != Hot && w.Keys < 1 {
		return fmt.Errorf("keys %d: must be at least 1", w.Keys)
	}
	if w.Distribution == Mix && w.Keys < 3 {
		return fmt.Errorf("keys %d: the mix needs at least 3 tenants, one per tier", w.Keys)
	}
	if w.Items < 1 || w.Items > 1000 {
		return fmt.Errorf("items %d: must be within 1..1000", w.Items)
	}
	if w.Cost < 1 {
		return fmt.Errorf("cost %d: must be at least 1", w.Cost)
	}
	if w.Distribution == Zipf && w.ZipfS != 0 && w.ZipfS <= 1 {
		return fmt.Errorf("zipf exponent %g: must be above 1", w.ZipfS)
	}
	if w.Limit.Limit < 1 {
		return fmt.Errorf("limit %d: must be at least 1", w.Limit.Limit)
	}
	if w.Limit.Period < time.Millisecond {
		return fmt.Errorf("period %v: must be at least 1ms", w.Limit.Period)
	}
	if w.Limit.Burst < 0 {
		return errors.New("burst: must not be negative")
	}
	if _, err := accuracy.FamilyOf(w.Limit.Algorithm); err != nil {
		return fmt.Errorf("algorithm %q: want one of token_bucket, gcra, sliding_window, fixed_window, sliding_log, leaky_bucket_policing, leaky_bucket_shaping", w.Limit.Algorithm)
	}
	return nil
}

// Describe is w in one line, for reports.
func (w Workload) Describe() string {
	var keys string
	switch w.Distribution {
	case Hot:
		keys = "one hot key"
	case Zipf:
		keys = fmt.Sprintf("zipf(s=%g) over %d keys", w.zipfS(), w.Keys)
	case Mix:
		keys = fmt.Sprintf("multi-tenant mix of %d tenants", w.Keys)
	default:
		keys = fmt.Sprintf("uniform over %d keys", w.Keys)
	}
	l := w.Limit
	lim := fmt.Sprintf("%s %d/%v", l.Algorithm, l.Limit, l.Period)
	if l.Burst > 0 {
		lim += fmt.Sprintf(" burst %d", l.Burst)
	}
	return fmt.Sprintf("%s, %d item(s)/request, cost %d, %s", keys, w.Items, w.Cost, lim)
}

func (w Workload) zipfS() float64 {
	if w.ZipfS == 0 {
		return DefaultZipfS
	}
	return w.ZipfS
}

// AccuracyLimit is the workload's limit as the admission accountant takes it.
func (w Workload) AccuracyLimit() (accuracy.Limit, error) {
	f, err := accuracy.FamilyOf(w.Limit.Algorithm)
	if err != nil {
		return accuracy.Limit{}, err
	}
	return accuracy.Limit{Family: f, Limit: w.Limit.Limit, Period: w.Limit.Period, Burst: w.Limit.Burst}, nil
}

// Generator produces the requests of a workload. It is not safe for
// concurrent use: each worker has its own.
type Generator struct {
	w     Workload
	limit *Limit
	name  string
	rng   *rand.Rand
	zipf  *rand.Zipf
	// tiers are the cumulative tenant counts of Mix's three tiers.
	tiers [3]int
	buf   []byte
}

// NewGenerator returns a generator of w's requests whose buckets are all
// named namespace, so that runs with different namespaces never share a
// bucket. The same seed gives the same sequence of requests.
func (w Workload) NewGenerator(namespace string, seed uint64) *Generator {
	// The generator's own copy of the limit: items point at it, and it
	// must not change under them.
	limit := w.Limit
	g := &Generator{w: w, limit: &limit, name: namespace}
	g.rng = rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	switch w.Distribution {
	case Zipf:
		g.zipf = rand.NewZipf(g.rng, w.zipfS(), 1, uint64(w.Keys-1))
	case Mix:
		heavy := max(1, w.Keys/100)
		medium := max(1, w.Keys*9/100)
		g.tiers = [3]int{heavy, heavy + medium, w.Keys}
	}
	return g
}

// mixTierShare is the cumulative share of requests of Mix's tiers, in
// percent: heavy 50%, medium 30%, light 20%.
var mixTierShare = [3]int{50, 80, 100}

// Next fills items (one request of len(items) items, normally w.Items) and,
// for the accountant, buckets[i] with an integer identifying items[i]'s
// bucket within this generator's namespace.
func (g *Generator) Next(items []Item, buckets []uint64) {
	if g.w.Distribution == Mix {
		g.nextMix(items, buckets)
		return
	}
	for i := range items {
		var k uint64
		switch g.w.Distribution {
		case Uniform:
			k = uint64(g.rng.IntN(g.w.Keys))
		case Zipf:
			k = g.zipf.Uint64()
		}
		g.buf = strconv.AppendUint(append(g.buf[:0], 'k'), k, 10)
		items[i] = Item{Name: g.name, Key: string(g.buf), Limit: g.limit, Cost: g.w.Cost}
		buckets[i] = k
	}
}

func (g *Generator) nextMix(items []Item, buckets []uint64) {
	lo, hi := 0, g.tiers[0]
	switch p := g.rng.IntN(100); {
	case p >= mixTierShare[1]:
		lo, hi = g.tiers[1], g.tiers[2]
	case p >= mixTierShare[0]:
		lo, hi = g.tiers[0], g.tiers[1]
	}
	t := uint64(lo + g.rng.IntN(hi-lo))
	for j := range items {
		g.buf = strconv.AppendUint(append(g.buf[:0], 't'), t, 10)
		g.buf = strconv.AppendInt(append(g.buf, '/', 'l'), int64(j), 10)
		items[j] = Item{Name: g.name, Key: string(g.buf), Limit: g.limit, Cost: g.w.Cost}
		buckets[j] = t*uint64(len(items)) + uint64(j)
	}
}
