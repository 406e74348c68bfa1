package api

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/quorate/quorate/api/ui"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/telemetry"
	"github.com/quorate/quorate/telemetry/topk"
)

// Top keys: the window when the caller names none, and the keys per
// policy by default and at most.
const (
	defaultTopWindow = 5 * time.Minute
	defaultTopLimit  = 10
	maxTopLimit      = 100
)

// topWindows are the windows the nodes' sketches keep.
var topWindows = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour}

// mergedTop merges the reports' top keys per policy and keeps n per
// policy, most first; unreachable names the nodes that did not answer.
func mergedTop(reports []telemetry.Report, n int) (keys []ui.TopKey, unreachable []string) {
	var answers [][]topk.Summary
	for _, r := range reports {
		if r.Error != "" {
			unreachable = append(unreachable, r.Node)
			continue
		}
		answers = append(answers, r.Top)
	}
	for _, s := range topk.Combine(answers...) {
		for _, e := range s.Top(n).Entries {
			if e.Count <= 0 {
				continue
			}
			keys = append(keys, ui.TopKey{Policy: s.Policy, Key: displayKey(e.Key), Count: uint64(e.Count), Err: uint64(e.Err)})
		}
	}
	slices.SortStableFunc(keys, func(a, b ui.TopKey) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Policy, b.Policy), strings.Compare(a.Key, b.Key))
	})
	return keys, unreachable
}

// topDenied is the status page's list: the most denied keys of every
// policy over the default window, at most n in all.
func topDenied(reports []telemetry.Report, n int) []ui.TopKey {
	keys, _ := mergedTop(reports, n)
	return keys[:min(len(keys), n)]
}

// displayKey shows a bucket key's values as an operator writes them.
func displayKey(k string) string { return strings.ReplaceAll(k, "\x1f", "/") }

// topQuery checks a TopKeys request; errors name the field.
func topQuery(req *pb.TopKeysRequest) (telemetry.TopQuery, error) {
	q := telemetry.TopQuery{Policy: req.GetPolicy(), By: cmp.Or(req.GetBy(), "denied"), Window: defaultTopWindow, Limit: defaultTopLimit}
	if _, err := topk.ParseKind(q.By); err != nil {
		return q, badRequest("by", "%q: want denied or hits", req.GetBy())
	}
	if w := req.GetWindow(); w != nil {
		if err := w.CheckValid(); err != nil || !slices.Contains(topWindows, w.AsDuration()) {
			return q, badRequest("window", "%v: want one of 1m, 5m, 15m, 1h", w.AsDuration())
		}
		q.Window = w.AsDuration()
	}
	switch l := req.GetLimit(); {
	case l > maxTopLimit:
		return q, badRequest("limit", "%d: at most %d", l, maxTopLimit)
	case l > 0:
		q.Limit = int(l)
	}
	return q, nil
}

// topKeys answers Admin.TopKeys from every node's report.
func topKeys(ctx context.Context, node Node, req *pb.TopKeysRequest) (*pb.TopKeysResponse, error) {
	q, err := topQuery(req)
	if err != nil {
		return nil, err
	}
	keys, unreachable := mergedTop(node.Reports(ctx, q), q.Limit)
	resp := &pb.TopKeysResponse{Unreachable: unreachable}
	for _, k := range keys {
		resp.Keys = append(resp.Keys, &pb.TopKey{Policy: k.Policy, Key: k.Key, Count: k.Count, Error: k.Err})
	}
	return resp, nil
}
