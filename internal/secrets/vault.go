package secrets

import (
	"context"
	"errors"
	"fmt"

	"warren/api"
	"warren/internal/ident"
	"warren/internal/store"
)

// Vault is tenants' secrets: the store's sealed values under a Box. It
// serves the API's secret routes and resolves the secrets egress rules
// name. It is safe for concurrent use.
type Vault struct {
	st  *store.Store
	box *Box
}

// NewVault returns the vault of st's secrets under box.
func NewVault(st *store.Store, box *Box) *Vault { return &Vault{st: st, box: box} }

// Set creates tenant's secret name or gives it a new version; created
// says which.
func (v *Vault) Set(ctx context.Context, tenant, name string, r api.SetSecretRequest) (api.Secret, bool, error) {
	name, err := api.SecretName(name)
	if err != nil {
		return api.Secret{}, false, err
	}
	if err := api.CheckSecret(r); err != nil {
		return api.Secret{}, false, err
	}
	return v.st.PutSecret(ctx, tenant, name, r.Metadata, func(id string, version int) ([]byte, error) {
		return v.box.Seal(tenant, id, version, r.Value), nil
	})
}

// Get returns tenant's secret by ID or name, without its value.
func (v *Vault) Get(ctx context.Context, tenant, ref string) (api.Secret, error) {
	ref, err := secretRef(ref)
	if err != nil {
		return api.Secret{}, err
	}
	sec, err := v.st.GetSecret(ctx, tenant, ref)
	return sec, notFound(err, ref)
}

// List returns tenant's secrets in name order, without values.
func (v *Vault) List(ctx context.Context, tenant string) ([]api.Secret, error) {
	return v.st.ListSecrets(ctx, tenant)
}

// Delete deletes tenant's secret by ID or name, every version of it.
// Sandboxes that use it keep the value they resolved when their rules
// were set; sandboxes given rules after it are refused.
func (v *Vault) Delete(ctx context.Context, tenant, ref string) error {
	ref, err := secretRef(ref)
	if err != nil {
		return err
	}
	return notFound(v.st.DeleteSecret(ctx, tenant, ref), ref)
}

// Check returns nil if tenant has a secret of each of names, else a
// CodeBadRequest error naming one it lacks.
func (v *Vault) Check(ctx context.Context, tenant string, names []string) error {
	_, lack, err := v.open(ctx, tenant, names, false)
	if err != nil {
		return err
	}
	return missing(lack)
}

// Resolve returns the current values of tenant's secrets of these names,
// for its sandbox (a single machine runs them all). A name the tenant has
// no secret of is a CodeBadRequest error naming it; no error carries a
// value.
func (v *Vault) Resolve(ctx context.Context, sandbox, tenant string, names []string) (map[string]string, error) {
	values, lack, err := v.open(ctx, tenant, names, true)
	if err != nil {
		return nil, err
	}
	return values, missing(lack)
}

// open returns the values of tenant's secrets of names (when values is
// set) and the names it has no secret of.
func (v *Vault) open(ctx context.Context, tenant string, names []string, values bool) (map[string]string, []string, error) {
	sealed, err := v.st.SealedSecrets(ctx, tenant, names)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]string{}
	var lack []string
	for _, n := range names {
		s, ok := sealed[n]
		switch {
		case !ok:
			lack = append(lack, n)
		case values:
			if out[n], err = v.box.Open(tenant, s.ID, s.Version, s.Sealed); err != nil {
				return nil, nil, fmt.Errorf("secret %s: %w", n, err)
			}
		}
	}
	return out, lack, nil
}

// secretRef is a route's reference to a secret in the store's form: an ID
// as it is, a name in lower case.
func secretRef(ref string) (string, error) {
	if ident.Valid(ref, api.SecretIDPrefix) {
		return ref, nil
	}
	return api.SecretName(ref)
}

func notFound(err error, ref string) error {
	if errors.Is(err, store.ErrNotFound) {
		return api.Errorf(api.CodeNotFound, "no secret %s", ref)
	}
	return err
}
