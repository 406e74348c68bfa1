package topk

import "errors"

var (
	// ErrSummary: a summary breaks an invariant of the package's guarantee
	// (or is not JSON); the wrapping message names the field.
	ErrSummary = errors.New("topk: invalid summary")
	// ErrConfig: a Config field is out of range; the message names it.
	ErrConfig = errors.New("topk: invalid config")
	// ErrArgument: a query's argument (k, n, window, by) is out of range;
	// the message names it.
	ErrArgument = errors.New("topk: invalid argument")
)
