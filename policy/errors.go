package policy

import "errors"

// Errors every refusal wraps, for errors.Is: the message itself names the
// document, line, column, policy and field.
var (
	// ErrInvalid: a document, policy, set, block or request is refused and
	// nothing changed. Front ends answer InvalidArgument or HTTP 400.
	ErrInvalid = errors.New("policy: invalid")
	// ErrNotFound: Delete named a policy that does not exist.
	ErrNotFound = errors.New("policy: no such policy")
)

// kindError gives an error's message unchanged and lets errors.Is find its kind.
type kindError struct {
	err, kind error
}

func (e kindError) Error() string   { return e.err.Error() }
func (e kindError) Unwrap() []error { return []error{e.err, e.kind} }

func invalid(err error) error {
	if err == nil || errors.Is(err, ErrInvalid) {
		return err
	}
	return kindError{err, ErrInvalid}
}
