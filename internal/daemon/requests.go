package daemon

import (
	"context"
	"time"

	"warren/api"
	"warren/internal/server"
	"warren/internal/store"
)

// Requests keeps the API's idempotency keys in st.
func Requests(st *store.Store) server.Requests { return storeRequests{st} }

// storeRequests is server.Requests over the store.
type storeRequests struct{ st *store.Store }

func (r storeRequests) Claim(ctx context.Context, tenant, key, request string) (*server.Answer, error) {
	rec, claimed, err := r.st.ClaimRequest(ctx, tenant, key, request, time.Now())
	if err != nil || claimed {
		return nil, err
	}
	return &server.Answer{Request: rec.Request, Status: rec.Status, Body: rec.Answer}, nil
}

func (r storeRequests) Answer(ctx context.Context, tenant, key string, status int, body []byte) error {
	return r.st.AnswerRequest(ctx, tenant, key, status, body)
}

func (r storeRequests) Release(ctx context.Context, tenant, key string) error {
	return r.st.ReleaseRequest(ctx, tenant, key)
}

// Quotas keeps tenants' quotas in st, for the API.
func Quotas(st *store.Store) server.Quotas { return storeQuotas{st} }

// storeQuotas is server.Quotas over the store.
type storeQuotas struct{ st *store.Store }

func (q storeQuotas) Quota(ctx context.Context, tenant string) (api.Quota, error) {
	r, err := q.st.GetQuota(ctx, tenant)
	return api.Quota{Sandboxes: r.Sandboxes, CPUs: r.CPUs, MemoryMB: r.MemoryMB, DiskMB: r.DiskMB,
		Snapshots: r.Snapshots, SnapshotBytes: r.SnapshotBytes, CreatesPerMinute: r.CreatesPerMinute}, err
}

func (q storeQuotas) SetQuota(ctx context.Context, tenant string, a api.Quota) error {
	return q.st.SetQuota(ctx, store.Quota{Tenant: tenant, Sandboxes: a.Sandboxes, CPUs: a.CPUs, MemoryMB: a.MemoryMB,
		DiskMB: a.DiskMB, Snapshots: a.Snapshots, SnapshotBytes: a.SnapshotBytes, CreatesPerMinute: a.CreatesPerMinute})
}

// Events reads the events st records, for the API.
func Events(st *store.Store) server.Events { return storeEvents{st} }

// storeEvents is server.Events over the store.
type storeEvents struct{ st *store.Store }

func (e storeEvents) Events(ctx context.Context, f server.EventFilter) ([]api.Event, error) {
	return e.st.Events(ctx, store.EventQuery{After: f.After, Tenant: f.Tenant, Sandbox: f.Sandbox, Snapshot: f.Snapshot, Kinds: f.Kinds, Limit: f.Limit})
}

func (e storeEvents) Bounds(ctx context.Context, tenant string) (oldest, newest int64, err error) {
	return e.st.EventBounds(ctx, tenant)
}

func (e storeEvents) Changed() <-chan struct{} { return e.st.EventsChanged() }
