package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes of the error body, and the HTTP status each is sent with.
const (
	CodeBadRequest       = "bad_request"        // 400
	CodeUnauthorized     = "unauthorized"       // 401
	CodeForbidden        = "forbidden"          // 403
	CodeNotFound         = "not_found"          // 404
	CodeConflict         = "conflict"           // 409: e.g. the sandbox is not running
	CodeTooLarge         = "payload_too_large"  // 413
	CodeTimeout          = "timeout"            // 504
	CodeUnavailable      = "unavailable"        // 503: e.g. no capacity, runtime missing
	CodeInternal         = "internal"           // 500: details only in the server's log
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeBadGateway       = "bad_gateway"        // 502: a sandbox's port did not answer (exposed ports)
	CodeTooMany          = "too_many_requests"  // 429: a bound on concurrent calls, or a tenant's quota, was reached
	// CodeInsufficientStorage (507): the node cannot promise the disk asked
	// for, or its free disk is below its reserve.
	CodeInsufficientStorage = "insufficient_storage"
	// CodeBuildFailed (422): a template build's step failed; the message
	// names the step and has its output.
	CodeBuildFailed = "build_failed"
)

var codeStatus = map[string]int{
	CodeBadRequest:          http.StatusBadRequest,
	CodeUnauthorized:        http.StatusUnauthorized,
	CodeForbidden:           http.StatusForbidden,
	CodeNotFound:            http.StatusNotFound,
	CodeConflict:            http.StatusConflict,
	CodeTooLarge:            http.StatusRequestEntityTooLarge,
	CodeTimeout:             http.StatusGatewayTimeout,
	CodeUnavailable:         http.StatusServiceUnavailable,
	CodeInternal:            http.StatusInternalServerError,
	CodeMethodNotAllowed:    http.StatusMethodNotAllowed,
	CodeBadGateway:          http.StatusBadGateway,
	CodeTooMany:             http.StatusTooManyRequests,
	CodeInsufficientStorage: http.StatusInsufficientStorage,
	CodeBuildFailed:         http.StatusUnprocessableEntity,
}

// Error is an error whose message is safe to show to an API caller. Any
// other error reaching the API is reported as "internal error" and its text
// goes only to the server's log.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error Error `json:"error"`
}

func (e *Error) Error() string { return e.Message }

// Status is the HTTP status the error is sent with.
func (e *Error) Status() int {
	if s, ok := codeStatus[e.Code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Errorf makes an *Error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// IsCode reports whether err is, or wraps, an *Error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
