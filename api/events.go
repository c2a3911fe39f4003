package api

import (
	"fmt"
	"strings"
	"time"
)

// Event is one change of a sandbox, a snapshot or a fleet node, as the
// events stream (GET /v1/events, docs/API.md "Events") sends it: its id
// (the stream's Last-Event-ID), when it happened, its kind, and the things
// it is about.
type Event struct {
	ID   int64     `json:"id"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Tenant owns the sandbox or snapshot; "" for a node's event.
	Tenant   string `json:"tenant,omitempty"`
	Sandbox  string `json:"sandbox,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	Node     string `json:"node,omitempty"`
	// State is the state the thing is in after the event.
	State string `json:"state,omitempty"`
	// Reason says why a sandbox failed or ended, or a snapshot failed, in
	// words fit for its owner.
	Reason string `json:"reason,omitempty"`
}

// The kinds of events. A sandbox that is restored names the snapshot it
// came from; one that fails or is lost says why.
const (
	EventSandboxCreated  = "sandbox.created"
	EventSandboxRunning  = "sandbox.running"
	EventSandboxRestored = "sandbox.restored"
	EventSandboxPaused   = "sandbox.paused"
	EventSandboxResumed  = "sandbox.resumed"
	// Auto-paused and auto-resumed: its lifecycle paused it (its timeout,
	// or idle) or a call woke it (auto_resume); the reason says which.
	EventSandboxAutoPaused  = "sandbox.auto_paused"
	EventSandboxAutoResumed = "sandbox.auto_resumed"
	EventSandboxMoving      = "sandbox.moving"
	EventSandboxFailed      = "sandbox.failed"
	EventSandboxExpired     = "sandbox.expired"
	EventSandboxDeleted     = "sandbox.deleted"

	EventSnapshotPending = "snapshot.pending"
	EventSnapshotDurable = "snapshot.durable"
	EventSnapshotFailed  = "snapshot.failed"
	EventSnapshotDeleted = "snapshot.deleted"

	EventNodeJoined = "node.joined"
	EventNodeState  = "node.state"
	EventNodeFenced = "node.fenced"

	// EventsLost is not stored: the stream sends it first, with no id,
	// when the events after the id it was asked to resume from are older
	// than its replay window and gone.
	EventsLost = "events.lost"
)

// EventKinds are the kinds of stored events.
var EventKinds = []string{
	EventSandboxCreated, EventSandboxRunning, EventSandboxRestored, EventSandboxPaused, EventSandboxResumed,
	EventSandboxAutoPaused, EventSandboxAutoResumed,
	EventSandboxMoving, EventSandboxFailed, EventSandboxExpired, EventSandboxDeleted,
	EventSnapshotPending, EventSnapshotDurable, EventSnapshotFailed, EventSnapshotDeleted,
	EventNodeJoined, EventNodeState, EventNodeFenced,
}

// ParseEventKinds reads a filter of kinds, comma-separated: each a kind,
// or a family ("sandbox", "snapshot", "node") that stands for all of its
// kinds. It returns the kinds, none for an empty filter (every kind).
func ParseEventKinds(s string) ([]string, error) {
	var kinds []string
	for k := range strings.SplitSeq(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		n := len(kinds)
		for _, known := range EventKinds {
			if known == k || strings.HasPrefix(known, k+".") {
				kinds = append(kinds, known)
			}
		}
		if len(kinds) == n {
			return nil, Errorf(CodeBadRequest, "unknown event kind %q: want one of %s, or sandbox, snapshot or node", k, strings.Join(EventKinds, ", "))
		}
	}
	return kinds, nil
}

// EventsRequest filters the events stream: by sandbox, by snapshot, by
// kinds (ParseEventKinds), every tenant's and the nodes' (AllTenants, an
// admin key's), and where it starts: after event After, or, when After is
// nil, with the next event to happen.
type EventsRequest struct {
	Sandbox    string
	Snapshot   string
	Kinds      []string
	AllTenants bool
	After      *int64
}

// LostEvents is the data of an EventsLost message: the stream was asked
// for the events after After, and the oldest it still holds is Oldest.
type LostEvents struct {
	Kind   string `json:"kind"`
	After  int64  `json:"after"`
	Oldest int64  `json:"oldest"`
}

func (l LostEvents) String() string {
	return fmt.Sprintf("the events after %d up to %d are gone: older than the replay window", l.After, l.Oldest)
}
