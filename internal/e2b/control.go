package e2b

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/internal/ident"
	"warren/internal/reqid"
)

// E2B's control API, as its SDKs call it (docs/E2B.md has the table).

// newSandbox is the body of E2B's create (POST /sandboxes, /v2/sandboxes).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *network          `json:"network"`
	Secure              *bool             `json:"secure"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	MCP          any `json:"mcp"`
	VolumeMounts any `json:"volumeMounts"`
	IAM          any `json:"iam"`
}

// network is E2B's network configuration of a sandbox.
type network struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool    `json:"allowPublicTraffic,omitempty"`
	// Rules are E2B's egress rules, destination → rules (rulesOf).
	Rules           json.RawMessage `json:"rules,omitempty"`
	EgressProxy     any             `json:"egressProxy,omitempty"`
	MaskRequestHost any             `json:"maskRequestHost,omitempty"`
}

// sandbox is E2B's answer to a create, a connect and (within a list) a
// fork.
type sandbox struct {
	TemplateID         string `json:"templateID"`
	SandboxID          string `json:"sandboxID"`
	ClientID           string `json:"clientID"`
	EnvdVersion        string `json:"envdVersion"`
	EnvdAccessToken    string `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
	Domain             string `json:"domain,omitempty"`
}

// detail is E2B's picture of a sandbox (get; list without the token).
type detail struct {
	TemplateID      string            `json:"templateID"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          string            `json:"domain,omitempty"`
	Network         *network          `json:"network,omitempty"`
	Lifecycle       lifecycle         `json:"lifecycle"`
}

// lifecycle is E2B's picture of what a sandbox's timeout does: onTimeout
// is "kill" or "pause".
type lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// RuntimeHeader on an E2B create chooses the sandbox's runtime (vm,
// container, auto), as warren's runtime field does; E2B's SDKs send it
// from their headers option.
const RuntimeHeader = "X-Warren-Runtime"

// clientID is what warren answers for E2B's (deprecated) client ID.
const clientID = "warren"

// sandboxID is the sandbox ID in id, which older E2B SDKs write as
// ID-CLIENTID.
func sandboxID(id string) string {
	return strings.TrimSuffix(id, "-"+clientID)
}

// control serves E2B's control API at path p.
func (h *Handler) control(w http.ResponseWriter, r *http.Request, p string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	// E2B versions some routes (/v2/sandboxes, /v3/templates): the
	// version changes nothing that warren answers.
	if len(parts) > 1 && len(parts[0]) > 1 && parts[0][0] == 'v' && strings.Trim(parts[0][1:], "0123456789") == "" {
		parts = parts[1:]
	}
	var err error
	route := r.Method + " " + strings.Join(parts[:min(1, len(parts))], "/")
	switch {
	case route == "POST sandboxes" && len(parts) == 1:
		err = h.create(w, r)
	case route == "GET sandboxes" && len(parts) == 1:
		err = h.list(w, r)
	case route == "GET sandboxes" && len(parts) == 2:
		err = h.get(w, r, parts[1])
	case route == "DELETE sandboxes" && len(parts) == 2:
		err = h.kill(w, r, parts[1])
	case route == "POST sandboxes" && len(parts) == 3:
		err = h.sandboxAction(w, r, parts[1], parts[2])
	case route == "PUT sandboxes" && len(parts) == 3 && parts[2] == "network":
		err = h.setNetwork(w, r, parts[1])
	case route == "GET sandboxes" && len(parts) == 3 && parts[2] == "metrics":
		err = h.metrics(w, r, parts[1])
	case route == "GET snapshots" && len(parts) == 1:
		err = h.listSnapshots(w, r)
	case route == "DELETE templates" && len(parts) == 2:
		err = h.deleteTemplate(w, r, parts[1])
	case route == "POST templates" && len(parts) == 1:
		err = h.requestBuild(w, r)
	case route == "GET templates" && len(parts) == 3 && parts[1] == "aliases":
		err = h.alias(w, r, parts[2])
	case route == "GET templates" && len(parts) == 4 && parts[2] == "files":
		err = h.fileLink(w, r, parts[1], parts[3])
	case route == "PUT templates" && len(parts) == 4 && parts[2] == "files":
		err = h.upload(w, r, parts[1], parts[3])
	case route == "POST templates" && len(parts) == 4 && parts[2] == "builds":
		err = h.trigger(w, r, parts[1], parts[3])
	case route == "GET templates" && len(parts) == 5 && parts[2] == "builds" && parts[4] == "status":
		err = h.buildStatus(w, r, parts[1], parts[3])
	case route == "GET secrets" && len(parts) == 1:
		err = h.listSecrets(w, r)
	case route == "POST secrets" && len(parts) == 1:
		err = h.createSecret(w, r)
	case route == "GET secrets" && len(parts) == 2:
		err = h.getSecret(w, r, parts[1])
	case route == "POST secrets" && len(parts) == 2:
		err = h.updateSecret(w, r, parts[1])
	case route == "DELETE secrets" && len(parts) == 2:
		err = h.deleteSecret(w, r, parts[1])
	case len(parts) > 0 && (parts[0] == "templates" || parts[0] == "volumes" || parts[0] == "volumecontent"):
		err = errorf(http.StatusNotImplemented, "E2B's %s API is not supported by warren (docs/E2B.md)", parts[0])
	default:
		err = errorf(http.StatusNotFound, "no E2B route %s %s", r.Method, p)
	}
	if err != nil {
		h.fail(w, r, err)
	}
}

// fail answers err in E2B's shape; an error that is no apiError is an
// internal one, whose detail stays in the server.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) || ae.status == http.StatusInternalServerError {
		if h.opts.Log != nil {
			h.opts.Log.Error("internal error", "request_id", reqid.From(r.Context()), "method", r.Method, "path", r.URL.Path, "err", err)
		}
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	writeError(w, ae.status, ae.message)
}

// sandboxAction serves POST /sandboxes/{id}/{action}.
func (h *Handler) sandboxAction(w http.ResponseWriter, r *http.Request, id, action string) error {
	switch action {
	case "timeout":
		return h.setTimeout(w, r, id)
	case "pause":
		return h.pause(w, r, id)
	case "connect", "resume":
		return h.connect(w, r, id)
	case "snapshots":
		return h.snapshot(w, r, id)
	case "fork":
		return h.fork(w, r, id)
	case "refreshes":
		return h.refresh(w, r, id)
	}
	return errorf(http.StatusNotFound, "no E2B route POST /sandboxes/%s/%s", id, action)
}

// maxBody bounds the JSON body of an E2B call.
const maxBody = 1 << 20

// decode reads r's JSON body into v; an empty body leaves v as it is.
// Fields v does not name are ignored: E2B's SDKs add fields over time.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return errorf(http.StatusBadRequest, "read the request body: %v", err)
	}
	if len(b) > maxBody {
		return errorf(http.StatusRequestEntityTooLarge, "request body larger than %d bytes", maxBody)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errorf(http.StatusBadRequest, "malformed JSON: %v", err)
	}
	return nil
}

// sandboxPath is warren's path of sandbox id, or not found for what cannot
// be a sandbox ID.
func sandboxPath(id string) (string, error) {
	id = sandboxID(id)
	if !ident.Valid(id, "sb-") {
		return "", errorf(http.StatusNotFound, "sandbox %s not found", id)
	}
	return "/v1/sandboxes/" + id, nil
}

// template maps an E2B template name onto warren's templates.
func template(name string) string {
	switch name {
	case "", "base", "default":
		return "default"
	}
	return name
}

// create serves E2B's create: a create of warren's, or a restore when the
// template is a snapshot of warren's (E2B's snapshots are templates).
func (h *Handler) create(w http.ResponseWriter, r *http.Request) error {
	var req newSandbox
	if err := decode(r, &req); err != nil {
		return err
	}
	switch {
	case req.AutoResume != nil && req.AutoResume.Enabled && (req.AutoPause == nil || !*req.AutoPause):
		return errorf(http.StatusBadRequest, "autoResume needs autoPause: only a sandbox that pauses at its timeout can wake")
	case req.MCP != nil:
		return errorf(http.StatusBadRequest, "mcp is not supported by warren")
	case req.VolumeMounts != nil:
		return errorf(http.StatusBadRequest, "volumeMounts are not supported by warren")
	case req.IAM != nil:
		return errorf(http.StatusBadRequest, "iam is not supported by warren")
	}
	// E2B has no runtimes: warren's default picks the strongest (a vm
	// where hardware virtualization works); RuntimeHeader asks for one.
	spec := api.SandboxSpec{Env: req.EnvVars, Metadata: req.Metadata, Runtime: r.Header.Get(RuntimeHeader)}
	if req.Timeout != nil {
		spec.TimeoutSeconds = *req.Timeout
	}
	// A pause keeps the disk, and the memory where the runtime can: asked
	// to keep no memory (autoPauseMemory false), warren keeps what it can
	// anyway.
	if req.AutoPause != nil && *req.AutoPause {
		spec.OnTimeout = api.OnTimeoutPause
		spec.AutoResume = req.AutoResume != nil && req.AutoResume.Enabled
	}
	policy, public, err := policyOf(req.AllowInternetAccess, req.Network)
	if err != nil {
		return err
	}
	spec.Network = policy
	var sb api.Sandbox
	snapshot, restore, err := h.snapshotOf(r, req.TemplateID)
	if err != nil {
		return err
	}
	if restore {
		var res api.RestoreResult
		if err := h.call(r, "POST", "/v1/snapshots/"+snapshot+"/restore", api.RestoreRequest{Count: 1, SandboxSpec: spec}, &res); err != nil {
			return err
		}
		if len(res.Sandboxes) != 1 {
			return errorf(http.StatusInternalServerError, "restore answered %d sandboxes", len(res.Sandboxes))
		}
		sb = res.Sandboxes[0]
	} else {
		if err := h.call(r, "POST", "/v1/sandboxes", api.CreateSandboxRequest{Template: template(req.TemplateID), SandboxSpec: spec}, &sb); err != nil {
			return err
		}
	}
	out, err := h.started(r, sb, req.TemplateID, public)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// started sets a new sandbox's preview access as E2B's traffic rules say
// (public unless allowPublicTraffic is false, whose ports then need the
// traffic token) and answers E2B's picture of it.
func (h *Handler) started(r *http.Request, sb api.Sandbox, templateID string, public bool) (sandbox, error) {
	var pv api.Preview
	if err := h.call(r, "PUT", "/v1/sandboxes/"+sb.ID+"/preview", api.SetPreviewRequest{Public: &public}, &pv); err != nil {
		return sandbox{}, err
	}
	out := h.view(sb, templateID)
	if !public {
		out.TrafficAccessToken = pv.Token
	}
	return out, nil
}

// view is E2B's picture of a started sandbox.
func (h *Handler) view(sb api.Sandbox, templateID string) sandbox {
	return sandbox{
		TemplateID: cmp.Or(templateID, sb.Template), SandboxID: sb.ID, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: sb.AgentToken, Domain: h.opts.Domain,
	}
}

// policyOf is warren's egress policy for E2B's network settings (nil: the
// default), and whether the sandbox's ports are public. E2B denies what
// denyOut lists, except what allowOut lists; a denyOut of 0.0.0.0/0 makes
// allowOut the only egress. E2B's rules are warren's (rulesOf): as in
// E2B, they grant no access of their own.
func policyOf(internet *bool, n *network) (*api.NetworkPolicy, bool, error) {
	public := true
	if n == nil {
		return egressOf(internet, nil), public, nil
	}
	if n.AllowPublicTraffic != nil {
		public = *n.AllowPublicTraffic
	}
	switch {
	case n.EgressProxy != nil:
		return nil, false, errorf(http.StatusBadRequest, "network.egressProxy is not supported by warren: a sandbox's egress leaves from its node, under its policy (allowOut, denyOut)")
	case n.MaskRequestHost != nil:
		return nil, false, errorf(http.StatusBadRequest, "network.maskRequestHost is not supported by warren: requests reach a sandbox's ports with the Host they were sent with")
	}
	rules, err := rulesOf(n.Rules)
	if err != nil {
		return nil, false, err
	}
	policy := egressOf(internet, n)
	if len(rules) > 0 {
		if policy == nil {
			policy = &api.NetworkPolicy{}
		}
		policy.Rules = rules
	}
	return policy, public, nil
}

// rulesOf is warren's egress rules for E2B's network.rules (nil: none).
// E2B's shape is warren's, destination → [{"transform": {"headers"}}], and
// a header's ${e2b.secrets.NAME} is a placeholder warren reads as its own;
// destinations are put in lower case, as E2B stores them. What warren
// judges of them (a destination's form, the secrets they name) it answers
// itself, a 400 passed on. A field of a rule that warren does not know is
// refused rather than dropped: the rule would do less than its author
// meant.
func rulesOf(raw json.RawMessage) (map[string][]api.NetworkRule, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var in map[string][]api.NetworkRule
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		return nil, errorf(http.StatusBadRequest, "network.rules: %v", err)
	}
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string][]api.NetworkRule, len(in))
	for dest, rules := range in {
		key := strings.ToLower(dest)
		if _, ok := out[key]; ok {
			return nil, errorf(http.StatusBadRequest, "network.rules: destination %.100q is named twice (destinations are not case-sensitive)", key)
		}
		out[key] = rules
	}
	return out, nil
}

// egressOf is warren's policy of allowOut and denyOut (nil: the default).
func egressOf(internet *bool, n *network) *api.NetworkPolicy {
	if internet != nil && !*internet {
		if n != nil && len(n.AllowOut) > 0 {
			return &api.NetworkPolicy{Allow: n.AllowOut}
		}
		return &api.NetworkPolicy{None: true}
	}
	if n == nil || len(n.AllowOut) == 0 && len(n.DenyOut) == 0 {
		return nil
	}
	var deny []string
	all := false
	for _, d := range n.DenyOut {
		if d == "0.0.0.0/0" {
			all = true
			continue
		}
		if !slices.Contains(n.AllowOut, d) {
			deny = append(deny, d)
		}
	}
	switch {
	case all && len(n.AllowOut) == 0:
		return &api.NetworkPolicy{None: true}
	case all:
		return &api.NetworkPolicy{Allow: n.AllowOut, Deny: deny}
	}
	return &api.NetworkPolicy{Deny: deny}
}

// e2bState is E2B's state of a warren state; "" for one E2B does not
// show (an ended sandbox is gone).
func e2bState(state string) string {
	switch state {
	case api.StateRunning, api.StateStarting, api.StateMoving:
		return "running"
	case api.StatePaused:
		return "paused"
	}
	return ""
}

// detailOf is E2B's picture of a sandbox.
func (h *Handler) detailOf(sb api.Sandbox) detail {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return detail{
		TemplateID: sb.Template, SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.CreatedAt, EndAt: sb.ExpiresAt,
		CPUCount: int(math.Ceil(sb.CPUs)), MemoryMB: sb.MemoryMB, DiskSizeMB: sb.DiskMB,
		Metadata: md, State: e2bState(sb.State), EnvdVersion: EnvdVersion,
		EnvdAccessToken: sb.AgentToken, Domain: h.opts.Domain,
		Lifecycle: lifecycleOf(sb.Lifecycle),
	}
}

// lifecycleOf is E2B's picture of lc.
func lifecycleOf(lc api.Lifecycle) lifecycle {
	if lc.OnTimeout == api.OnTimeoutPause {
		return lifecycle{OnTimeout: "pause", AutoResume: lc.AutoResume}
	}
	return lifecycle{OnTimeout: "kill"}
}

// lookup returns sandbox id as E2B sees it: not found once it ended.
func (h *Handler) lookup(r *http.Request, id string) (api.Sandbox, error) {
	p, err := sandboxPath(id)
	if err != nil {
		return api.Sandbox{}, err
	}
	var sb api.Sandbox
	if err := h.call(r, "GET", p, nil, &sb); err != nil {
		return api.Sandbox{}, err
	}
	if e2bState(sb.State) == "" {
		return api.Sandbox{}, errorf(http.StatusNotFound, "sandbox %s not found (it is %s)", id, sb.State)
	}
	return sb, nil
}

// get serves GET /sandboxes/{id}.
func (h *Handler) get(w http.ResponseWriter, r *http.Request, id string) error {
	sb, err := h.lookup(r, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.detailOf(sb))
	return nil
}

// kill serves DELETE /sandboxes/{id}: 404 for one already gone.
func (h *Handler) kill(w http.ResponseWriter, r *http.Request, id string) error {
	sb, err := h.lookup(r, id)
	if err != nil {
		return err
	}
	if err := h.call(r, "DELETE", "/v1/sandboxes/"+sb.ID, nil, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setTimeout serves POST /sandboxes/{id}/timeout {"timeout": seconds}.
func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, id string) error {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Timeout == nil {
		return errorf(http.StatusBadRequest, "timeout is required")
	}
	p, err := sandboxPath(id)
	if err != nil {
		return err
	}
	if err := h.call(r, "POST", p+"/timeout", map[string]int64{"timeout_seconds": *req.Timeout}, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// refresh serves POST /sandboxes/{id}/refreshes {"duration": seconds}: the
// timeout made at least that long from now.
func (h *Handler) refresh(w http.ResponseWriter, r *http.Request, id string) error {
	var req struct {
		Duration int64 `json:"duration"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	sb, err := h.lookup(r, id)
	if err != nil {
		return err
	}
	if left := time.Until(sb.ExpiresAt); req.Duration > 0 && left < time.Duration(req.Duration)*time.Second {
		if err := h.call(r, "POST", "/v1/sandboxes/"+sb.ID+"/timeout", map[string]int64{"timeout_seconds": req.Duration}, nil); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause serves POST /sandboxes/{id}/pause: 409 for a sandbox already
// paused (the SDK's false); a sandbox whose runtime cannot pause is a 400.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request, id string) error {
	sb, err := h.lookup(r, id)
	if err != nil {
		return err
	}
	if sb.State == api.StatePaused {
		return errorf(http.StatusConflict, "sandbox %s is already paused", id)
	}
	if err := h.call(r, "POST", "/v1/sandboxes/"+sb.ID+"/pause", nil, nil); err != nil {
		if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status == http.StatusConflict {
			return errorf(http.StatusBadRequest, "%s", ae.message)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect serves POST /v2/sandboxes/{id}/connect (and the older resume):
// a paused sandbox resumes (201), a running one answers as it is (200);
// a timeout, when given, is set.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, id string) error {
	var req struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Memory != nil && !*req.Memory {
		return errorf(http.StatusBadRequest, "a resume without memory (a reboot) is not supported by warren")
	}
	sb, err := h.lookup(r, id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if sb.State == api.StatePaused {
		if err := h.call(r, "POST", "/v1/sandboxes/"+sb.ID+"/resume", nil, &sb); err != nil {
			return err
		}
		status = http.StatusCreated
	}
	if req.Timeout != nil {
		if err := h.call(r, "POST", "/v1/sandboxes/"+sb.ID+"/timeout", map[string]int64{"timeout_seconds": *req.Timeout}, &sb); err != nil {
			return err
		}
	}
	writeJSON(w, status, h.view(sb, ""))
	return nil
}

// fork serves POST /sandboxes/{id}/fork {"count", "timeout"}: E2B's list
// of results, one per child.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request, id string) error {
	var req struct {
		Count   int    `json:"count"`
		Timeout *int64 `json:"timeout"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	p, err := sandboxPath(id)
	if err != nil {
		return err
	}
	fr := api.ForkRequest{Count: max(req.Count, 1)}
	if req.Timeout != nil {
		fr.TimeoutSeconds = *req.Timeout
	}
	var res api.ForkResult
	if err := h.call(r, "POST", p+"/fork", fr, &res); err != nil {
		return err
	}
	type result struct {
		Sandbox sandbox `json:"sandbox"`
	}
	out := make([]result, 0, len(res.Sandboxes))
	for _, c := range res.Sandboxes {
		s, err := h.started(r, c, "", true)
		if err != nil {
			return err
		}
		out = append(out, result{Sandbox: s})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// setNetwork serves PUT /sandboxes/{id}/network (E2B's
// SandboxNetworkUpdateConfig: allowOut, denyOut, rules and
// allow_internet_access): the egress policy and its rules, replaced whole.
func (h *Handler) setNetwork(w http.ResponseWriter, r *http.Request, id string) error {
	var req struct {
		network
		AllowInternetAccess *bool `json:"allow_internet_access"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	policy, _, err := policyOf(req.AllowInternetAccess, &req.network)
	if err != nil {
		return err
	}
	if req.network.AllowPublicTraffic != nil {
		return errorf(http.StatusBadRequest, "allowPublicTraffic cannot change after create")
	}
	if policy == nil {
		policy = &api.NetworkPolicy{}
	}
	p, err := sandboxPath(id)
	if err != nil {
		return err
	}
	if err := h.call(r, "PUT", p+"/network", policy, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listPages bounds the pages of warren's list one E2B list reads to find
// its sandboxes; past it the answer is short and says where to go on.
const listPages = 20

// list serves GET /v2/sandboxes?metadata=&state=&limit=&nextToken=.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > api.MaxListLimit {
			return errorf(http.StatusBadRequest, "bad limit %q: want 1 to %d", v, api.MaxListLimit)
		}
		limit = n
	}
	want, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		return err
	}
	states := []string{api.StateRunning, api.StateStarting, api.StateMoving, api.StatePaused}
	if v := q.Get("state"); v != "" {
		states = nil
		for s := range strings.SplitSeq(v, ",") {
			switch s {
			case "running":
				states = append(states, api.StateRunning, api.StateStarting, api.StateMoving)
			case "paused":
				states = append(states, api.StatePaused)
			default:
				return errorf(http.StatusBadRequest, "bad state %q: want running or paused", s)
			}
		}
	}
	tmpl := q.Get("template")
	out := []detail{}
	token := q.Get("nextToken")
	for range listPages {
		pq := url.Values{"limit": {strconv.Itoa(limit - len(out))}, "state": {strings.Join(states, ",")}}
		if token != "" {
			pq.Set("page_token", token)
		}
		var page api.SandboxList
		if err := h.call(r, "GET", "/v1/sandboxes?"+pq.Encode(), nil, &page); err != nil {
			return err
		}
		for _, sb := range page.Sandboxes {
			if matches(sb.Metadata, want) && (tmpl == "" || sb.Template == tmpl) {
				out = append(out, h.detailOf(sb))
			}
		}
		token = page.NextPageToken
		if token == "" || len(out) == limit {
			break
		}
	}
	if token != "" {
		w.Header().Set("X-Next-Token", token)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// pageQuery is warren's page of an E2B list's query (limit, nextToken).
func pageQuery(q url.Values, limit int) url.Values {
	out := url.Values{}
	if v := q.Get("limit"); v != "" {
		out.Set("limit", v)
	} else if limit > 0 {
		out.Set("limit", strconv.Itoa(limit))
	}
	if v := q.Get("nextToken"); v != "" {
		out.Set("page_token", v)
	}
	return out
}

// metadataFilter reads E2B's metadata query: key=value pairs in query
// form, keys and values URL-encoded once more.
func metadataFilter(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	pairs, err := url.ParseQuery(v)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "bad metadata filter %q: %v", v, err)
	}
	out := map[string]string{}
	for k, vs := range pairs {
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, errorf(http.StatusBadRequest, "bad metadata filter %q", v)
		}
		out[key] = val
	}
	return out, nil
}

// matches reports whether md holds every pair of want.
func matches(md, want map[string]string) bool {
	for k, v := range want {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// metric is one of E2B's samples of a sandbox's resource use.
type metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	CPUCount      uint32    `json:"cpuCount"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	MemCache      uint64    `json:"memCache"`
	DiskUsed      uint64    `json:"diskUsed"`
	DiskTotal     uint64    `json:"diskTotal"`
}

// metrics serves GET /sandboxes/{id}/metrics: warren keeps no history of a
// sandbox's use, so the answer is one sample, taken now (whatever start
// and end ask for).
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, id string) error {
	p, err := sandboxPath(id)
	if err != nil {
		return err
	}
	var m api.SandboxMetrics
	if err := h.call(r, "GET", p+"/metrics", nil, &m); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, []metric{{
		Timestamp: m.At, TimestampUnix: m.At.Unix(), CPUUsedPct: m.CPUUsedPct, CPUCount: m.CPUCount,
		MemUsed: m.MemoryUsedBytes, MemTotal: m.MemoryTotalBytes, MemCache: m.MemoryCacheBytes,
		DiskUsed: m.DiskUsedBytes, DiskTotal: m.DiskTotalBytes,
	}})
	return nil
}
