package daemon

import (
	"context"
	"time"

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
