package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"warren/api"
)

// maxAnswer bounds an answer of warren's API read for translation: the
// largest is a page of a list.
const maxAnswer = 16 << 20

// apiError is an error answer of warren's API, or one of this package's,
// as E2B's SDKs are to see it.
type apiError struct {
	status  int
	message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.message) }

// errorf makes an apiError.
func errorf(status int, format string, args ...any) error {
	return &apiError{status: status, message: fmt.Sprintf(format, args...)}
}

// body is E2B's error body.
type body struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers with E2B's error body.
func writeError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, body{Code: status, Message: message})
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// call makes the warren API call method path with the JSON body in (nil:
// none) for r's caller, through the handler every API request takes, and
// decodes its answer into out (nil: ignored). An error answer is an
// *apiError with warren's status and message.
func (h *Handler) call(r *http.Request, method, path string, in, out any) error {
	var rd io.Reader = http.NoBody
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if k := r.Header.Get("X-API-Key"); k != "" {
		req.Header.Set("X-API-Key", k)
	}
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.RemoteAddr = r.RemoteAddr
	req.Host = h.host
	if req.Host == "" {
		req.Host = r.Host
	}
	rec := &recorder{header: http.Header{}}
	h.next.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.overflow {
		return fmt.Errorf("%s %s: answer larger than %d bytes", method, path, maxAnswer)
	}
	if rec.status >= 300 {
		var eb api.ErrorBody
		if json.Unmarshal(rec.buf.Bytes(), &eb) != nil || eb.Error.Message == "" {
			eb.Error.Message = strings.TrimSpace(rec.buf.String())
		}
		return &apiError{status: rec.status, message: eb.Error.Message}
	}
	if out != nil {
		if err := json.Unmarshal(rec.buf.Bytes(), out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// recorder keeps an answer of warren's API, up to maxAnswer bytes.
type recorder struct {
	header   http.Header
	status   int
	buf      bytes.Buffer
	overflow bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.buf.Len()+len(p) > maxAnswer {
		r.overflow = true
		return 0, errors.New("answer too large")
	}
	return r.buf.Write(p)
}
