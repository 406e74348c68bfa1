package bench

import (
	"strings"
	"testing"
	"time"
)

func draw(w Workload, seed uint64, n int) (keys []string, buckets []uint64) {
	g := w.NewGenerator("ns", seed)
	items, bs := make([]Item, w.Items), make([]uint64, w.Items)
	for range n {
		g.Next(items, bs)
		for i := range items {
			keys = append(keys, items[i].Key)
			buckets = append(buckets, bs[i])
		}
	}
	return keys, buckets
}

func TestGeneratorIsDeterministic(t *testing.T) {
	for _, d := range Distributions {
		w := testWorkload()
		w.Distribution, w.Items = d, 3
		a, _ := draw(w, 7, 100)
		b, _ := draw(w, 7, 100)
		c, _ := draw(w, 8, 100)
		if strings.Join(a, ",") != strings.Join(b, ",") {
			t.Errorf("%s: same seed, different keys", d)
		}
		if d != Hot && strings.Join(a, ",") == strings.Join(c, ",") {
			t.Errorf("%s: different seeds, same keys", d)
		}
	}
}

func TestGeneratorItems(t *testing.T) {
	w := testWorkload()
	w.Items, w.Cost = 2, 3
	g := w.NewGenerator("run-1", 1)
	items, bs := make([]Item, 2), make([]uint64, 2)
	g.Next(items, bs)
	for _, it := range items {
		if it.Name != "run-1" || it.Cost != 3 || it.Limit.Limit != 10 || it.Limit.Algorithm != "token_bucket" {
			t.Errorf("item %+v", it)
		}
	}
}

func TestBucketIDsMatchKeys(t *testing.T) {
	// The accountant tells buckets apart by id: ids and keys must be one
	// to one.
	for _, d := range Distributions {
		w := testWorkload()
		w.Distribution, w.Items, w.Keys = d, 4, 50
		keys, ids := draw(w, 1, 2000)
		byKey, byID := map[string]uint64{}, map[uint64]string{}
		for i, k := range keys {
			if id, ok := byKey[k]; ok && id != ids[i] {
				t.Fatalf("%s: key %s has ids %d and %d", d, k, id, ids[i])
			}
			if k2, ok := byID[ids[i]]; ok && k2 != k {
				t.Fatalf("%s: id %d has keys %s and %s", d, ids[i], k2, k)
			}
			byKey[k], byID[ids[i]] = ids[i], k
		}
	}
}

func share(keys []string, top func(string) bool) float64 {
	n := 0
	for _, k := range keys {
		if top(k) {
			n++
		}
	}
	return float64(n) / float64(len(keys))
}

func TestDistributions(t *testing.T) {
	w := testWorkload()
	w.Keys = 1000

	w.Distribution = Uniform
	keys, _ := draw(w, 1, 20000)
	counts := map[string]int{}
	most := 0
	for _, k := range keys {
		counts[k]++
		most = max(most, counts[k])
	}
	// 20 draws per key on average: every key drawn, none hot.
	if len(counts) < 990 || most > 60 {
		t.Errorf("uniform: %d distinct keys of 1000, the busiest drawn %d times", len(counts), most)
	}

	w.Distribution = Zipf
	keys, _ = draw(w, 1, 20000)
	if s := share(keys, func(k string) bool { return k == "k0" }); s < 0.1 {
		t.Errorf("zipf: the top key has %.2f of the traffic; want a hot key", s)
	}

	w.Distribution = Hot
	keys, _ = draw(w, 1, 100)
	if s := share(keys, func(k string) bool { return k == "k0" }); s != 1 {
		t.Errorf("hot: %.2f on one key; want all", s)
	}

	// Mix: 1000 tenants; tenants 0-9 (1%) get 50% of requests, 10-99 (9%)
	// get 30%, the rest 20%. Every item of a request is the same tenant's.
	w.Distribution, w.Items = Mix, 3
	g := w.NewGenerator("ns", 1)
	items, bs := make([]Item, 3), make([]uint64, 3)
	var heavy, medium, n float64
	for range 20000 {
		g.Next(items, bs)
		tenant := strings.SplitN(items[0].Key, "/", 2)[0]
		for j, it := range items {
			if !strings.HasPrefix(it.Key, tenant+"/l") || !strings.HasSuffix(it.Key, "l"+string(rune('0'+j))) {
				t.Fatalf("mix: items %v are not one tenant's limits", items)
			}
		}
		var id int
		for _, c := range tenant[1:] {
			id = id*10 + int(c-'0')
		}
		switch {
		case id < 10:
			heavy++
		case id < 100:
			medium++
		}
		n++
	}
	if h := heavy / n; h < 0.47 || h > 0.53 {
		t.Errorf("mix: heavy tier %.3f of requests; want 0.50", h)
	}
	if m := medium / n; m < 0.27 || m > 0.33 {
		t.Errorf("mix: medium tier %.3f of requests; want 0.30", m)
	}
}

func TestWorkloadValidate(t *testing.T) {
	ok := testWorkload()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Workload){
		func(w *Workload) { w.Distribution = "pareto" },
		func(w *Workload) { w.Keys = 0 },
		func(w *Workload) { w.Distribution, w.Keys = Mix, 2 },
		func(w *Workload) { w.Items = 0 },
		func(w *Workload) { w.Items = 1001 },
		func(w *Workload) { w.Cost = 0 },
		func(w *Workload) { w.Distribution, w.ZipfS = Zipf, 1 },
		func(w *Workload) { w.Limit.Limit = 0 },
		func(w *Workload) { w.Limit.Period = time.Microsecond },
		func(w *Workload) { w.Limit.Algorithm = "bogus" },
	}
	for i, f := range bad {
		w := testWorkload()
		f(&w)
		if err := w.Validate(); err == nil {
			t.Errorf("case %d: %+v accepted", i, w)
		}
	}
	hot := testWorkload()
	hot.Distribution, hot.Keys = Hot, 0
	if err := hot.Validate(); err != nil {
		t.Errorf("hot needs no keys: %v", err)
	}
}
