package ctxwarden

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the ErrorInfo.domain of errors raised by the ctxwarden server.
const ErrorDomain = "ctxwarden.dev"

// ErrorReason returns the stable machine-readable reason of a failed call,
// e.g. "SESSION_NOT_FOUND" or "CONCURRENT_MODIFICATION": the reason of the
// google.rpc.ErrorInfo the server attaches to its status (trailer
// grpc-status-details-bin). It returns "" when err is nil, is not a gRPC
// status, or carries no ErrorInfo (e.g. a client-side DEADLINE_EXCEEDED).
// Wrapped errors (fmt.Errorf("...: %w", err)) are unwrapped.
func ErrorReason(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return ""
	}
	st := se.GRPCStatus()
	if st == nil {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
