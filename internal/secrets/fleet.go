package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"warren/api"
	"warren/internal/pki"
	"warren/internal/store"
)

// In a fleet the control replicas keep the key; a node never holds it. A
// node asks a control replica, over the fleet's mutual TLS (FleetHandler,
// Remote), for the values of the secrets a sandbox's rules name when it
// gives the sandbox its rules, and the replica answers only for a sandbox
// the store places on that node: a node resolves the secrets of the
// tenants whose sandboxes it runs, and no other.

// FleetPath is the route of the control replicas' fleet listener that
// nodes resolve secrets by.
const FleetPath = "/fleet/v1/secrets"

// Bounds of a node's request.
const (
	maxFleetBody  = 64 << 10
	maxFleetNames = 1024
)

// fleetRequest is a node's question. Without a sandbox it asks only which
// of the tenant's names have no secret (a create's check, before the
// sandbox has a record); with one, the values, for that sandbox.
type fleetRequest struct {
	Sandbox string   `json:"sandbox,omitempty"`
	Tenant  string   `json:"tenant"`
	Names   []string `json:"names"`
}

type fleetAnswer struct {
	Values  map[string]string `json:"values,omitempty"`
	Missing []string          `json:"missing,omitempty"`
}

// FleetHandler answers nodes' requests; it must be served with the fleet
// member's ServerConfig(pki.Node), so that every caller is a node of the
// fleet, named by its certificate.
func (v *Vault) FleetHandler(log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(code int, err error) {
			log.Warn("a node's request for secrets refused", "err", err)
			http.Error(w, err.Error(), code)
		}
		if r.Method != http.MethodPost || r.URL.Path != FleetPath {
			fail(http.StatusNotFound, fmt.Errorf("no route %s %s", r.Method, r.URL.Path))
			return
		}
		if r.TLS == nil {
			fail(http.StatusForbidden, errors.New("not over the fleet's TLS"))
			return
		}
		node, err := pki.PeerIdentity(*r.TLS)
		if err != nil || node.Role != pki.Node {
			fail(http.StatusForbidden, fmt.Errorf("not a node of the fleet: %v", err))
			return
		}
		var req fleetRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxFleetBody)).Decode(&req); err != nil || req.Tenant == "" || len(req.Names) > maxFleetNames {
			fail(http.StatusBadRequest, fmt.Errorf("node %s: a bad request for secrets", node.Name))
			return
		}
		ans, err := v.answer(r.Context(), node.Name, req)
		switch {
		case api.IsCode(err, api.CodeForbidden):
			fail(http.StatusForbidden, err)
			return
		case err != nil:
			fail(http.StatusInternalServerError, err)
			return
		}
		log.Info("secrets resolved for a node", "node", node.Name, "sandbox", req.Sandbox, "names", len(req.Names), "missing", len(ans.Missing))
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(ans)
	})
}

func (v *Vault) answer(ctx context.Context, node string, req fleetRequest) (fleetAnswer, error) {
	if req.Sandbox != "" {
		rec, err := v.st.GetSandbox(ctx, req.Sandbox)
		if errors.Is(err, store.ErrNotFound) || err == nil && (rec.Node != node || rec.Tenant != req.Tenant || final(rec.State)) {
			return fleetAnswer{}, api.Errorf(api.CodeForbidden, "node %s does not run sandbox %s of tenant %s", node, req.Sandbox, req.Tenant)
		}
		if err != nil {
			return fleetAnswer{}, err
		}
	}
	values, lack, err := v.open(ctx, req.Tenant, req.Names, req.Sandbox != "")
	return fleetAnswer{Values: values, Missing: lack}, err
}

func final(state string) bool {
	return state == api.StateStopped || state == api.StateFailed
}

// Remote is a fleet node's secrets: each question goes to the control
// replicas' fleet listeners, in turn until one answers.
type Remote struct {
	urls   []string
	client *http.Client
}

// NewRemote asks the control replicas at addrs (host:port of their fleet
// listeners) as member, a node.
func NewRemote(member *pki.Member, addrs []string) *Remote {
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "https://" + a + FleetPath
	}
	return &Remote{urls: urls, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: member.ClientConfigFor(pki.Control), MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute,
	}}}
}

// Check reports which of names tenant has no secret of, as Vault.Check.
func (r *Remote) Check(ctx context.Context, tenant string, names []string) error {
	ans, err := r.ask(ctx, fleetRequest{Tenant: tenant, Names: names})
	if err != nil {
		return err
	}
	return missing(ans.Missing)
}

// Resolve returns the values for sandbox, which must be this node's.
func (r *Remote) Resolve(ctx context.Context, sandbox, tenant string, names []string) (map[string]string, error) {
	ans, err := r.ask(ctx, fleetRequest{Sandbox: sandbox, Tenant: tenant, Names: names})
	if err != nil {
		return nil, err
	}
	if err := missing(ans.Missing); err != nil {
		return nil, err
	}
	return ans.Values, nil
}

func (r *Remote) ask(ctx context.Context, q fleetRequest) (fleetAnswer, error) {
	body, _ := json.Marshal(q)
	var errs []error
	for _, u := range r.urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return fleetAnswer{}, err
		}
		resp, err := r.client.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxFleetBody+maxFleetNames*(api.MaxSecretBytes+api.MaxSecretNameLen+8)))
		resp.Body.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Errorf("%s: %s: %s", u, resp.Status, bytes.TrimSpace(b)))
			if resp.StatusCode == http.StatusForbidden {
				break // every replica would say so
			}
			continue
		}
		var ans fleetAnswer
		if err := json.Unmarshal(b, &ans); err != nil {
			return fleetAnswer{}, fmt.Errorf("%s: %w", u, err)
		}
		return ans, nil
	}
	if len(errs) == 0 {
		return fleetAnswer{}, errors.New("no control replica to resolve secrets with (warren node --control-secrets)")
	}
	return fleetAnswer{}, fmt.Errorf("resolve secrets through the control replicas: %w", errors.Join(errs...))
}

// missing is the error of names without a secret: CodeBadRequest, naming
// the first.
func missing(names []string) error {
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	return api.Errorf(api.CodeBadRequest, "network.rules: no secret %q (PUT /v1/secrets/%s sets it)", names[0], names[0])
}
