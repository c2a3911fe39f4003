package api

import (
	"time"
)

// FileInfo describes one file or directory in a sandbox.
type FileInfo struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"` // file, dir, symlink, other
	Size          int64     `json:"size"`
	Mode          uint32    `json:"mode"` // permission bits, e.g. 0644 (420 in JSON)
	Permissions   string    `json:"permissions"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// MkdirRequest is the body of POST /v1/sandboxes/{id}/files/mkdir. Missing
// parents are created.
type MkdirRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"` // default 0755
	User string `json:"user,omitempty"`
}

// MoveRequest is the body of POST /v1/sandboxes/{id}/files/move.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// FileList is the answer to GET /v1/sandboxes/{id}/files/list: entries
// depth first, each directory's in byte order of their names.
type FileList struct {
	Entries       []FileInfo `json:"entries"`
	NextPageToken string     `json:"next_page_token,omitempty"`
}
