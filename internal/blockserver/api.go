package blockserver

import "time"

// The front ends a volume is served through.
const (
	// FrontFile serves the disk as one file in a FUSE mount, for a loop
	// device (the container runtime on hosts without kernel NBD).
	FrontFile = "file"
	// FrontNBD serves the disk over NBD on a unix socket, for QEMU's own
	// client (the vm runtime).
	FrontNBD = "nbd"
)

// VolumeRequest serves a volume (PUT /v1/volumes/{id}): the one this node
// serves already, or the one whose state it kept, or, with Recover, the
// newest the tiers hold, or else a new one.
type VolumeRequest struct {
	// Base is the snapshot or template layer a new volume starts as.
	Base string `json:"base,omitempty"`
	// SizeBytes is a new volume's size; 0 takes the base's.
	SizeBytes int64 `json:"size_bytes,omitempty"`
	// Front is how the disk is served: FrontFile or FrontNBD.
	Front string `json:"front"`
	// Recover takes the volume from the tiers, as its last flush left it,
	// when this node holds no state of it (another node served it).
	Recover bool `json:"recover,omitempty"`
}

// VolumeInfo is a served volume.
type VolumeInfo struct {
	ID    string `json:"id"`
	Front string `json:"front"`
	// Path is the disk's file (FrontFile) or the NBD socket (FrontNBD).
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
	// Layer is the newest layer in the durable tier: every flushed write
	// is in it or below it.
	Layer string `json:"layer"`
	// Replicated is the newest layer in object storage.
	Replicated string `json:"replicated,omitempty"`
	// RecoveryPoint is the time up to which object storage holds every
	// flushed write; absent when it holds them all.
	RecoveryPoint *time.Time `json:"recovery_point,omitempty"`
	DirtyBytes    int64      `json:"dirty_bytes"`
	CachedBytes   int64      `json:"cached_bytes"`
	// DurableBytes is what the volume holds in the durable tier (its
	// layers' chunks and those waiting to be reclaimed), at most
	// DurableLimitBytes; UsedBytes is what its disk's cells take of it.
	DurableBytes      int64 `json:"durable_bytes"`
	DurableLimitBytes int64 `json:"durable_limit_bytes"`
	UsedBytes         int64 `json:"used_bytes"`
	// Refused says why the volume's last flush was refused (its durable
	// bound); absent when it was not.
	Refused string `json:"refused,omitempty"`
}

// SnapshotRequest takes a snapshot of a volume (POST
// /v1/volumes/{id}/snapshots).
type SnapshotRequest struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
}

// SnapshotInfo is a snapshot taken of a volume: a layer over Parent.
type SnapshotInfo struct {
	ID        string `json:"id"`
	Parent    string `json:"parent,omitempty"`
	SizeBytes int64  `json:"size_bytes"`
}

// errorBody is every error's answer.
type errorBody struct {
	Error string `json:"error"`
}
