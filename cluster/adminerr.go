package cluster

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
