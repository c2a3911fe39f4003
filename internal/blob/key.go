package blob

import (
	"errors"
	"fmt"
	"strings"
)

// MaxKeyLen is the longest key a Store accepts, in bytes.
const MaxKeyLen = 512

// ErrInvalidKey means a key or list prefix breaks the key rules of ValidKey.
// Every backend refuses such a key before doing any I/O, so retrying the
// call cannot help.
var ErrInvalidKey = errors.New("invalid blob key")

// ValidKey reports whether key may name an object, and if not, what is
// wrong with it, in an error wrapping ErrInvalidKey. A key is 1 to
// MaxKeyLen bytes of [a-z0-9._/-], split by '/' into segments none of which
// is empty, "." or ".."; so it has no leading or trailing '/'. These rules
// make every key a safe relative path on a local disk and a plain S3 key.
func ValidKey(key string) error {
	if why := checkKey(key, false); why != "" {
		return keyError(key, why)
	}
	return nil
}

// ValidPrefix reports whether prefix may be passed to List: the empty
// string, which matches every key, or the beginning of some valid key, such
// as "snap/" or "snap/ab". The error wraps ErrInvalidKey.
func ValidPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if why := checkKey(prefix, true); why != "" {
		return keyError(prefix, "prefix: "+why)
	}
	return nil
}

// keyError quotes the key unless it is long enough to flood a log line.
func keyError(key, why string) error {
	if len(key) > 64 {
		return fmt.Errorf("%w %q…: %s", ErrInvalidKey, key[:64], why)
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why)
}

// checkKey returns why s is not a valid key, or "" if it is. With prefix
// set, s need only be the beginning of a valid key: it may end with '/',
// and its last, unfinished segment may be "." or ".." (it may grow into
// "..x").
func checkKey(s string, prefix bool) string {
	if s == "" {
		return "empty"
	}
	if len(s) > MaxKeyLen {
		return fmt.Sprintf("%d bytes long, at most %d allowed", len(s), MaxKeyLen)
	}
	for i := 0; i < len(s); i++ {
		if !keyByte(s[i]) {
			return fmt.Sprintf("byte %#x at offset %d is not one of [a-z0-9._/-]", s[i], i)
		}
	}
	if s[0] == '/' {
		return "starts with '/'"
	}
	if !prefix && s[len(s)-1] == '/' {
		return "ends with '/'"
	}
	segments := strings.Split(s, "/")
	if prefix {
		// The last segment is unfinished: "" (s ends with '/'), "." and
		// ".." can all still grow into a valid segment.
		segments = segments[:len(segments)-1]
	}
	for _, seg := range segments {
		switch seg {
		case "":
			return "has an empty segment (\"//\")"
		case ".", "..":
			return fmt.Sprintf("has a %q segment", seg)
		}
	}
	return ""
}

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '/' || c == '-'
}
