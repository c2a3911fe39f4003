package client

import (
	"context"
	"fmt"
	"net/http"

	"warren/api"
)

// SetSecret creates the caller's secret name or gives it a new version
// with req's value (and req's metadata, when given), and returns it
// without the value, which no call ever returns. Sent again only when the
// connection was refused: a repeat that reached the server would count
// another version.
func (c *Client) SetSecret(ctx context.Context, name string, req api.SetSecretRequest) (api.Secret, error) {
	var s api.Secret
	if name == "" {
		return s, fmt.Errorf("set secret: empty name")
	}
	cl := &call{op: "set secret", method: http.MethodPut, path: idPath("secrets", name), in: req, retry: retryRefused}
	err := c.do(ctx, cl, &s)
	return s, err
}

// ListSecrets returns the caller's secrets in name order, without values.
func (c *Client) ListSecrets(ctx context.Context) ([]api.Secret, error) {
	var list api.SecretList
	cl := &call{op: "list secrets", method: http.MethodGet, path: "/v1/secrets", retry: retryIdempotent}
	if err := c.do(ctx, cl, &list); err != nil {
		return nil, err
	}
	return list.Secrets, nil
}

// GetSecret returns the caller's secret ref (its name or its sec_ ID),
// without its value. An *Error with CodeNotFound when there is none.
func (c *Client) GetSecret(ctx context.Context, ref string) (api.Secret, error) {
	var s api.Secret
	if ref == "" {
		return s, fmt.Errorf("get secret: empty name")
	}
	cl := &call{op: "get secret", method: http.MethodGet, path: idPath("secrets", ref), retry: retryIdempotent}
	err := c.do(ctx, cl, &s)
	return s, err
}

// DeleteSecret deletes the caller's secret ref (its name or its sec_ ID),
// every version of it. Sandboxes whose rules resolved it keep the value
// they have.
func (c *Client) DeleteSecret(ctx context.Context, ref string) error {
	if ref == "" {
		return fmt.Errorf("delete secret: empty name")
	}
	cl := &call{op: "delete secret", method: http.MethodDelete, path: idPath("secrets", ref), retry: retryIdempotent, goneIsDone: true}
	return c.do(ctx, cl, nil)
}
