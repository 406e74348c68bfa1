package cluster

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Request bounds. A bucket's key is ring.BucketKey(name, key), name + NUL +
// key, which must fit in fsm.MaxKeyLen. The items and the total cost of a
// request are bounded by the node's Limits.
const (
	MaxNameLen      = 128
	MaxKeyLen       = fsm.MaxKeyLen - MaxNameLen - 1
	MaxRequestIDLen = 256
)

// item is one validated request item.
type item struct {
	op   fsm.Op // the Take, keyed by bucket
	fail pb.FailMode
	// soft: a SOFT or SHADOW policy's bucket, which never denies the request.
	soft bool
	// emergencyCap, with fail open, bounds what this node admits for the
	// bucket while its shard cannot decide (policy emergency_cap).
	emergencyCap *fsm.Limit
	// replayed: the shard answered from the idempotency record of an
	// earlier request, so this one took nothing and must refund nothing.
	replayed bool
}

// algorithm is the item's algorithm as the API names it.
func (it item) algorithm() pb.Algorithm {
	if a := it.op.Limit.Algorithm; int(a) < len(apiAlgorithms) {
		return apiAlgorithms[a]
	}
	return pb.Algorithm_ALGORITHM_UNSPECIFIED
}

// apiAlgorithms inverts algorithms, indexed by fsm.Algorithm: every answer
// names its buckets' algorithms, so no map walk per item.
var apiAlgorithms = func() []pb.Algorithm {
	out := make([]pb.Algorithm, len(algorithms)+1)
	for a, f := range algorithms {
		out[f] = a
	}
	return out
}()

var algorithms = map[pb.Algorithm]fsm.Algorithm{
	pb.Algorithm_ALGORITHM_TOKEN_BUCKET:          fsm.TokenBucket,
	pb.Algorithm_ALGORITHM_GCRA:                  fsm.GCRA,
	pb.Algorithm_ALGORITHM_SLIDING_WINDOW:        fsm.SlidingWindow,
	pb.Algorithm_ALGORITHM_FIXED_WINDOW:          fsm.FixedWindow,
	pb.Algorithm_ALGORITHM_SLIDING_LOG:           fsm.SlidingLog,
	pb.Algorithm_ALGORITHM_LEAKY_BUCKET_POLICING: fsm.LeakyPolicing,
	pb.Algorithm_ALGORITHM_LEAKY_BUCKET_SHAPING:  fsm.LeakyShaping,
}

// badRequest is an InvalidArgument status naming the field, with a
// google.rpc.BadRequest detail for clients that read details.
func badRequest(field, format string, args ...any) error {
	desc := fmt.Sprintf(format, args...)
	st := status.New(codes.InvalidArgument, field+": "+desc)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}}}); err == nil {
		st = d
	}
	return st.Err()
}

// parseRequest validates a whole request before anything is consumed, so a
// bad request changes nothing.
func parseRequest(req *pb.CheckRequest, lim *Limits) ([]item, error) {
	if len(req.GetRequestId()) > MaxRequestIDLen {
		return nil, badRequest("request_id", "longer than %d bytes", MaxRequestIDLen)
	}
	if _, ok := pb.Mode_name[int32(req.GetMode())]; !ok {
		return nil, badRequest("mode", "unknown mode %d", req.GetMode())
	}
	n := len(req.GetItems())
	if n == 0 {
		return nil, badRequest("items", "at least one item is required")
	}
	if n > lim.MaxRequestItems {
		return nil, badRequest("items", "%d items exceed the maximum of %d per request", n, lim.MaxRequestItems)
	}
	items := make([]item, n)
	var cost int64
	for i, it := range req.GetItems() {
		var err error
		if items[i], err = parseItem(it); err != nil {
			var fe *fieldError
			if errors.As(err, &fe) {
				return nil, badRequest(fieldName(i, fe.field), "%s", fe.msg)
			}
			return nil, err
		}
		if c := items[i].op.Cost; c > lim.MaxRequestCost-cost {
			return nil, badRequest("items", "total cost exceeds the maximum of %d per request (at items[%d])", lim.MaxRequestCost, i)
		}
		cost += items[i].op.Cost
	}
	return items, nil
}

func fieldName(i int, field string) string { return fmt.Sprintf("items[%d].%s", i, field) }

type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func fieldErr(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

func parseItem(it *pb.Item) (item, error) {
	switch {
	case it.GetName() == "":
		return item{}, fieldErr("name", "must not be empty")
	case len(it.GetName()) > MaxNameLen:
		return item{}, fieldErr("name", "longer than %d bytes", MaxNameLen)
	case strings.IndexByte(it.GetName(), 0) >= 0:
		return item{}, fieldErr("name", "must not contain NUL")
	case it.GetKey() == "":
		return item{}, fieldErr("key", "must not be empty")
	case len(it.GetKey()) > MaxKeyLen:
		return item{}, fieldErr("key", "%d bytes exceed the maximum of %d", len(it.GetKey()), MaxKeyLen)
	case len(it.GetIdempotencyKey()) > fsm.MaxKeyLen:
		return item{}, fieldErr("idempotency_key", "longer than %d bytes", fsm.MaxKeyLen)
	}
	alg, ok := algorithms[it.GetAlgorithm()]
	if !ok {
		return item{}, fieldErr("algorithm", "unknown algorithm %s", it.GetAlgorithm())
	}
	if _, ok := pb.FailMode_name[int32(it.GetFail())]; !ok {
		return item{}, fieldErr("fail", "unknown fail mode %d", it.GetFail())
	}
	if it.GetLimit() <= 0 {
		return item{}, fieldErr("limit", "must be positive, got %d", it.GetLimit())
	}
	if it.GetPeriod() == nil {
		return item{}, fieldErr("period", "required")
	}
	if err := it.GetPeriod().CheckValid(); err != nil {
		return item{}, fieldErr("period", "%v", err)
	}
	l := fsm.Limit{Algorithm: alg, Limit: it.GetLimit(), Period: it.GetPeriod().AsDuration(), Burst: it.GetBurst()}
	if err := l.Validate(); err != nil {
		return item{}, fieldErr(limitField(err), "%s", strings.TrimPrefix(err.Error(), "fsm: "))
	}
	cost := it.GetCost()
	if cost == 0 {
		cost = 1
	}
	if cost < 0 || cost > l.Capacity() {
		return item{}, fieldErr("cost", "%d is outside [1, %d], the bucket's capacity", cost, l.Capacity())
	}
	return item{
		op:   fsm.Op{Kind: fsm.OpTake, Key: ring.BucketKey(it.GetName(), it.GetKey()), Limit: l, Cost: cost, IdempotencyKey: it.GetIdempotencyKey()},
		fail: it.GetFail(),
	}, nil
}

// limitField names the request field a limit validation error is about.
func limitField(err error) string {
	switch {
	case errors.Is(err, fsm.ErrBurst):
		return "burst"
	case errors.Is(err, fsm.ErrPeriod):
		return "period"
	case errors.Is(err, fsm.ErrUnknownAlgorithm):
		return "algorithm"
	}
	return "limit"
}
