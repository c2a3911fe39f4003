package agent

import (
	"errors"
	"path"
	"strings"

	"connectrpc.com/connect"
)

// errPathEscapes is the answer to a path that climbs above "/". Such a path
// is refused, never cleaned into something the caller did not write.
var errPathEscapes = errors.New("path escapes the sandbox root")

// resolvePath makes p absolute (relative paths are taken from home) and
// clean. It refuses "", NUL bytes, and any path whose ".." climbs above "/",
// all with CodeInvalidArgument.
func resolvePath(p, home string) (string, error) {
	if p == "" {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("empty path"))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("path contains a NUL byte"))
	}
	if !strings.HasPrefix(p, "/") {
		// home comes from the sandbox's own /etc/passwd: one that is not an
		// absolute path without NUL bytes counts as "/".
		if !strings.HasPrefix(home, "/") || strings.IndexByte(home, 0) >= 0 {
			home = "/"
		}
		p = strings.TrimSuffix(home, "/") + "/" + p
	}
	depth := 0
	for part := range strings.SplitSeq(p, "/") {
		switch part {
		case "", ".":
		case "..":
			if depth == 0 {
				return "", connect.NewError(connect.CodeInvalidArgument, errPathEscapes)
			}
			depth--
		default:
			depth++
		}
	}
	return path.Clean(p), nil
}
