package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"warren/api"
)

// resultChunk is how much output writeExecResult encodes at a time.
const resultChunk = 32 << 10

// writeExecResult answers res as an ExecResult with stdout and stderr in
// encoding (api.EncodingBase64, else text), encoding them piece by piece
// into the response: the daemon never holds the encoded form, which for
// control bytes in JSON text is six times the output (NUL is \u0000).
func writeExecResult(w http.ResponseWriter, res api.ExecResult, stdout, stderr []byte, encoding string) error {
	if encoding == api.EncodingBase64 {
		res.Encoding = api.EncodingBase64
	}
	res.Stdout, res.Stderr = "", ""
	meta, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	// The fields but stdout and stderr, which Marshal wrote empty.
	empty := []byte(`"stdout":"","stderr":"",`)
	if bytes.Count(meta, empty) != 1 {
		return fmt.Errorf("encode response: unexpected ExecResult layout %s", meta)
	}
	meta = bytes.Replace(meta, empty, nil, 1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(meta[:len(meta)-1]); err != nil { // without its '}'
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if _, err := fmt.Fprintf(w, `,"%s":"`, f.name); err != nil {
			return err
		}
		if err := writeJSONText(w, f.data, encoding == api.EncodingBase64); err != nil {
			return err
		}
		if _, err := io.WriteString(w, `"`); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, "}\n")
	return err
}

// writeJSONText writes b as the inside of a JSON string: base64, or text
// escaped as JSON escapes it (invalid UTF-8 as U+FFFD), in pieces cut
// between runes.
func writeJSONText(w io.Writer, b []byte, b64 bool) error {
	if b64 {
		enc := base64.NewEncoder(base64.StdEncoding, w)
		if _, err := enc.Write(b); err != nil {
			return err
		}
		return enc.Close()
	}
	for len(b) > 0 {
		n := min(len(b), resultChunk)
		if n < len(b) {
			// Back off to the start of a rune the piece would cut.
			for i := n - 1; i >= 0 && i > n-utf8.UTFMax; i-- {
				if utf8.RuneStart(b[i]) {
					if !utf8.FullRune(b[i:n]) {
						n = i
					}
					break
				}
			}
		}
		q, err := json.Marshal(string(b[:n]))
		if err != nil {
			return err
		}
		if _, err := w.Write(q[1 : len(q)-1]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
