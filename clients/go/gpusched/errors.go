package gpusched

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/gpusched/gpusched/clients/go/gpuschedv1"
)

// FieldViolation is one problem with the request: the field or annotation it concerns, e.g.
// `workload.kubernetes.annotations["hami.io/device-scoring-weights"]` or `nodes[1].name`, what
// is wrong and what is accepted, and the kind of problem as a stable machine-readable reason
// such as "INVALID_SCORING_WEIGHTS" (a google.rpc.BadRequest field violation). Branch on
// Reason (or Kind), not on the field path or the description.
type FieldViolation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
	// Reason is a v1.ViolationReason name without its "VIOLATION_REASON_" prefix.
	Reason string `json:"reason"`
}

// Kind is the reason as the API enum; v1.ViolationReason_VIOLATION_REASON_UNSPECIFIED when the
// reason is empty or unknown to this client.
func (v FieldViolation) Kind() v1.ViolationReason { return ViolationReasonOf(v.Reason) }

// ViolationReasonOf returns the v1.ViolationReason of a reason string such as
// "INVALID_SCORING_WEIGHTS" (VIOLATION_REASON_UNSPECIFIED when empty or unknown).
func ViolationReasonOf(reason string) v1.ViolationReason {
	if reason == "" {
		return v1.ViolationReason_VIOLATION_REASON_UNSPECIFIED
	}
	return v1.ViolationReason(v1.ViolationReason_value[violationReasonPrefix+reason])
}

// ViolationReasonString returns the reason string the server sends for k: its name without
// the "VIOLATION_REASON_" prefix ("" for VIOLATION_REASON_UNSPECIFIED).
func ViolationReasonString(k v1.ViolationReason) string {
	if k == v1.ViolationReason_VIOLATION_REASON_UNSPECIFIED {
		return ""
	}
	return strings.TrimPrefix(k.String(), violationReasonPrefix)
}

const violationReasonPrefix = "VIOLATION_REASON_"

// ErrorDomain is the google.rpc.ErrorInfo domain of the server's errors.
const ErrorDomain = "gpusched.io"

// ErrorInfo is the google.rpc.ErrorInfo of an error: Reason is the reason of the first
// violation (e.g. "INVALID_SCORING_WEIGHTS", "LIMIT_EXCEEDED"), Domain is ErrorDomain, and
// Metadata has "field" (of the first violation), "reasons" (the distinct reasons, comma
// separated) and "violationCount".
type ErrorInfo struct {
	Reason   string            `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata"`
}

func (v FieldViolation) String() string { return v.Field + ": " + v.Description }

// QuotaViolation is one limit a request went over (a google.rpc.QuotaFailure violation, sent
// with RESOURCE_EXHAUSTED), e.g. subject "limits.max_nodes".
type QuotaViolation struct {
	Subject     string `json:"subject"`
	Description string `json:"description"`
}

// Error is the error of every Client method: the gRPC status code and message, with the
// structured details the server sends in the grpc-status-details-bin trailer.
//
//	var e *gpusched.Error
//	if errors.As(err, &e) && e.Code == codes.InvalidArgument {
//		for _, v := range e.FieldViolations { ... }
//	}
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message.
	Message string
	// FieldViolations are the google.rpc.BadRequest violations (INVALID_ARGUMENT).
	FieldViolations []FieldViolation
	// QuotaViolations are the google.rpc.QuotaFailure violations (RESOURCE_EXHAUSTED for a
	// request over a limit).
	QuotaViolations []QuotaViolation
	// MissingDigests are the subjects (sha256/<hex>/<size>) of the google.rpc.PreconditionFailure
	// violations of type MISSING (FAILED_PRECONDITION: node parts referenced by digest that the
	// server does not hold).
	MissingDigests []string
	// MissingMore is set when the server listed only some of the missing parts (a violation of
	// type MORE): the client then sends every part inline.
	MissingMore bool
	// RetryDelay is the google.rpc.RetryInfo delay (server busy or shutting down); 0 when absent.
	RetryDelay time.Duration
	// ErrorInfo is the google.rpc.ErrorInfo detail; nil when absent (the server sends one with
	// every error that has violations).
	ErrorInfo *ErrorInfo

	status *status.Status
}

// Error implements error: "gpusched: CODE: message", followed by the field violations that
// the message does not already name.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gpusched: %s: %s", codeName(e.Code), e.Message)
	var extra []string
	for _, v := range e.FieldViolations {
		if !strings.Contains(e.Message, v.Field) {
			extra = append(extra, v.String())
		}
	}
	if len(extra) > 0 {
		b.WriteString(" [" + strings.Join(extra, "; ") + "]")
	}
	return b.String()
}

// GRPCStatus returns the original status, so status.FromError and status.Code work on an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.status == nil {
		return status.New(e.Code, e.Message)
	}
	return e.status
}

// Is reports whether the error is target: an *Error with the same code, or
// context.DeadlineExceeded / context.Canceled for DEADLINE_EXCEEDED / CANCELLED.
func (e *Error) Is(target error) bool {
	switch target {
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	case context.Canceled:
		return e.Code == codes.Canceled
	}
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code
	}
	return false
}

// Reason returns the google.rpc.ErrorInfo reason (the reason of the first violation, e.g.
// "INVALID_SCORING_WEIGHTS" or "LIMIT_EXCEEDED"), or "" when the error carries none.
func (e *Error) Reason() string {
	if e.ErrorInfo == nil {
		return ""
	}
	return e.ErrorInfo.Reason
}

// ViolationsOf returns the field violations of one kind, in order.
func (e *Error) ViolationsOf(kind v1.ViolationReason) []FieldViolation {
	var out []FieldViolation
	for _, v := range e.FieldViolations {
		if v.Kind() == kind {
			out = append(out, v)
		}
	}
	return out
}

// Fields returns the fields named by the field violations, in order.
func (e *Error) Fields() []string {
	out := make([]string, 0, len(e.FieldViolations))
	for _, v := range e.FieldViolations {
		out = append(out, v.Field)
	}
	return out
}

// Violation returns the first field violation whose field contains s (for example an
// annotation key such as AnnotationDeviceScoringWeights), and whether there is one.
func (e *Error) Violation(s string) (FieldViolation, bool) {
	for _, v := range e.FieldViolations {
		if strings.Contains(v.Field, s) {
			return v, true
		}
	}
	return FieldViolation{}, false
}

// FromError converts a gRPC error into an *Error; nil stays nil, an *Error is returned as is,
// and an error without a gRPC status becomes codes.Unknown.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	st, ok := status.FromError(err)
	if !ok {
		// Not a status error: keep its text.
		st = status.New(codes.Unknown, err.Error())
	}
	return fromStatus(st)
}

func fromStatus(st *status.Status) *Error {
	e := &Error{Code: st.Code(), Message: st.Message(), status: st}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription(), Reason: v.GetReason()})
			}
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				e.QuotaViolations = append(e.QuotaViolations, QuotaViolation{Subject: v.GetSubject(), Description: v.GetDescription()})
			}
		case *errdetails.ErrorInfo:
			e.ErrorInfo = &ErrorInfo{Reason: d.GetReason(), Domain: d.GetDomain(), Metadata: d.GetMetadata()}
		case *errdetails.PreconditionFailure:
			for _, v := range d.GetViolations() {
				switch v.GetType() {
				case "MISSING":
					e.MissingDigests = append(e.MissingDigests, v.GetSubject())
				case "MORE":
					e.MissingMore = true
				}
			}
		case *errdetails.RetryInfo:
			if d.GetRetryDelay() != nil {
				e.RetryDelay = d.GetRetryDelay().AsDuration()
			}
		}
	}
	return e
}

// wrap turns a call's error into an *Error (nil stays nil).
func wrap(err error) error {
	if err == nil {
		return nil
	}
	return FromError(err)
}

// Code returns the gRPC code of err: codes.OK for nil, codes.Unknown for an error that carries
// no status.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	return FromError(err).Code
}

// FieldViolations returns the google.rpc.BadRequest field violations carried by err, if any.
func FieldViolations(err error) []FieldViolation {
	if err == nil {
		return nil
	}
	return FromError(err).FieldViolations
}

// IsInvalidArgument reports whether err is INVALID_ARGUMENT: bad input, with field violations.
func IsInvalidArgument(err error) bool { return Code(err) == codes.InvalidArgument }

// IsResourceExhausted reports whether err is RESOURCE_EXHAUSTED: a request over a configured
// limit, or the server busy.
func IsResourceExhausted(err error) bool { return Code(err) == codes.ResourceExhausted }

// IsDeadlineExceeded reports whether err is DEADLINE_EXCEEDED (the caller's deadline, or the
// server's request timeout).
func IsDeadlineExceeded(err error) bool { return Code(err) == codes.DeadlineExceeded }

// IsUnavailable reports whether err is UNAVAILABLE: no connection, or the server shutting down.
func IsUnavailable(err error) bool { return Code(err) == codes.Unavailable }

// codeName is the canonical upper-case name of a code, e.g. INVALID_ARGUMENT.
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.Canceled:
		return "CANCELLED"
	case codes.Unknown:
		return "UNKNOWN"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	case codes.DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.AlreadyExists:
		return "ALREADY_EXISTS"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.Aborted:
		return "ABORTED"
	case codes.OutOfRange:
		return "OUT_OF_RANGE"
	case codes.Unimplemented:
		return "UNIMPLEMENTED"
	case codes.Internal:
		return "INTERNAL"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.DataLoss:
		return "DATA_LOSS"
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	}
	return c.String()
}

// CodeName returns the canonical name of a gRPC code as the test vectors and other gRPC
// implementations spell it (INVALID_ARGUMENT, CANCELLED, ...).
func CodeName(c codes.Code) string { return codeName(c) }
