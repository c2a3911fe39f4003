package daemon

import (
	"context"
	"errors"

	"warren/internal/listing"
	"warren/internal/server"
	"warren/internal/store"
)

// Keys serves the API's keys from st.
func Keys(st *store.Store) server.Keys { return storeKeys{st} }

// storeKeys is server.Keys over the store.
type storeKeys struct{ st *store.Store }

func (k storeKeys) LookupKey(ctx context.Context, key string) (server.Key, error) {
	rec, err := k.st.LookupKey(ctx, key)
	if err != nil {
		return server.Key{}, keyErr(err)
	}
	return serverKey(rec), nil
}

func (k storeKeys) CreateKey(ctx context.Context, tenant, scope string) (string, error) {
	return k.st.CreateKey(ctx, store.Key{Tenant: tenant, Scope: scope})
}

func (k storeKeys) ListKeys(ctx context.Context, page listing.Page) ([]server.Key, error) {
	recs, err := k.st.ListKeys(ctx, page)
	if err != nil {
		return nil, err
	}
	out := make([]server.Key, len(recs))
	for i, rec := range recs {
		out[i] = serverKey(rec)
	}
	return out, nil
}

func (k storeKeys) DeleteKey(ctx context.Context, id string) error {
	return keyErr(k.st.DeleteKey(ctx, id))
}

func (k storeKeys) MissingKeys(ctx context.Context, ids []string) ([]string, error) {
	return k.st.MissingKeys(ctx, ids)
}

func (k storeKeys) RotateAgentTokens(ctx context.Context, tenant string) ([]string, error) {
	return k.st.RotateAgentTokens(ctx, tenant)
}

func (k storeKeys) Revocations(ctx context.Context) (int64, error) { return k.st.Revocations(ctx) }

func serverKey(rec store.Key) server.Key {
	return server.Key{ID: rec.ID, Tenant: rec.Tenant, Admin: rec.Admin, Scope: rec.Scope, CreatedAt: rec.CreatedAt}
}

// keyErr is the server's name for a key the store does not have.
func keyErr(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return server.ErrUnknownKey
	}
	return err
}
