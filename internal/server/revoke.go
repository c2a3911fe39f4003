package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"warren/api"
)

// Revocation (docs/API.md, "Revoking keys and agent tokens"): what a
// credential opened ends when the credential is revoked, on every node.
//
//   - Every request that an API key or a sandbox's agent token
//     authenticated is a session while its handler runs: an exec or
//     process stream, a terminal, an events stream, a file stream, a
//     proxied connection to a sandbox's port, as long as they last.
//   - Revoking a key here (DELETE /v1/keys/{id}) or rotating a tenant's
//     agent tokens (POST /v1/tenants/{tenant}/rotate-agent-tokens) ends
//     this process's sessions of them at once: each one's context is
//     cancelled and its client connection closed (a hijacked one too).
//   - Every revocationPoll while any session is open, the process reads
//     the store's revocation count, which every revocation of any process
//     moves on in the transaction that revokes. A session opened before
//     the count it was checked at moved on is checked again
//     (Keys.MissingKeys, Sandboxes.AgentAccess), and ends if its
//     credential is gone. So a revocation on another node (any of a
//     fleet's processes) ends the sessions here within revocationPoll and
//     two queries. Between revocations the poll is one small read.
//
// A session's count is the one this process had read before its
// credential was checked: a revocation that committed after that check
// moves the count past it, however the two interleave.

// revocationPoll is how often a process with open sessions reads the
// revocation count.
const revocationPoll = time.Second

// revocationCheckTimeout bounds one round of the revocation check.
const revocationCheckTimeout = 10 * time.Second

// session is one request that a credential authenticated.
type session struct {
	// keyID is the API key's ID; "" for an agent token's session, which
	// names its sandbox and token instead.
	keyID          string
	sandbox, token string
	cancel         context.CancelFunc
	// conn is the client's connection, when the http.Server told it
	// (HTTPServer's ConnContext).
	conn net.Conn
	// checked is the revocation count at which the credential was known
	// good; guarded by sessions.mu.
	checked int64
}

// sessions are a process's open sessions. The goroutine that watches
// them (watch) runs while there are any: the last one to end stops it.
type sessions struct {
	keys Keys
	sb   Sandboxes // nil on a control replica, which has no agent routes
	log  *slog.Logger
	poll time.Duration

	mu       sync.Mutex // guards the fields below and each session's checked
	open     map[*session]struct{}
	seen     int64 // the highest revocation count read
	watching bool  // watch runs
}

// counted returns the revocation count last read: take it before a
// credential is checked, and give it to begin.
func (ss *sessions) counted() int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.seen
}

// begin makes r a session of sess's credential, known good at count
// checked, and returns r with the session's context. end ends it.
func (ss *sessions) begin(r *http.Request, sess *session, checked int64) *http.Request {
	ctx, cancel := context.WithCancel(r.Context())
	sess.cancel, sess.checked = cancel, checked
	sess.conn, _ = ctx.Value(connKey{}).(net.Conn)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.open == nil {
		ss.open = map[*session]struct{}{}
	}
	ss.open[sess] = struct{}{}
	if !ss.watching {
		ss.watching = true
		go ss.watch()
	}
	return r.WithContext(ctx)
}

// end forgets sess, once its handler returned. It may be called again.
func (ss *sessions) end(sess *session) {
	ss.mu.Lock()
	delete(ss.open, sess)
	ss.mu.Unlock()
	sess.cancel()
}

// revoke ends the open sessions that match: their context is cancelled
// and their connection closed.
func (ss *sessions) revoke(match func(*session) bool) {
	ss.mu.Lock()
	var ended []*session
	for sess := range ss.open {
		if match(sess) {
			delete(ss.open, sess)
			ended = append(ended, sess)
		}
	}
	ss.mu.Unlock()
	for _, sess := range ended {
		sess.cancel()
		if sess.conn != nil {
			sess.conn.Close()
		}
	}
	if len(ended) > 0 && ss.log != nil {
		ss.log.Info("revoked credential: ended its open requests", "key", ended[0].keyID, "sandbox", ended[0].sandbox, "requests", len(ended))
	}
}

// revokeKey ends the sessions of the key named id.
func (ss *sessions) revokeKey(id string) {
	ss.revoke(func(sess *session) bool { return sess.keyID == id })
}

// revokeAgentTokens ends the agent-token sessions of the sandboxes ids.
func (ss *sessions) revokeAgentTokens(ids []string) {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	ss.revoke(func(sess *session) bool { return sess.keyID == "" && set[sess.sandbox] })
}

// watch checks the open sessions every poll, until there are none.
func (ss *sessions) watch() {
	tick := time.NewTicker(ss.poll)
	defer tick.Stop()
	for range tick.C {
		ss.mu.Lock()
		if len(ss.open) == 0 {
			ss.watching = false
			ss.mu.Unlock()
			return
		}
		ss.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), revocationCheckTimeout)
		err := ss.check(ctx)
		cancel()
		if err != nil && ss.log != nil {
			ss.log.Warn("check open requests' credentials", "err", err)
		}
	}
}

// check reads the revocation count and checks again the credentials of
// the sessions opened before it moved on; it ends those revoked.
func (ss *sessions) check(ctx context.Context) error {
	n, err := ss.keys.Revocations(ctx)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	ss.seen = max(ss.seen, n)
	var stale []*session
	for sess := range ss.open {
		if sess.checked < n {
			stale = append(stale, sess)
		}
	}
	ss.mu.Unlock()
	if len(stale) == 0 {
		return nil
	}
	gone := map[*session]bool{}
	keyIDs, sandboxes := map[string]bool{}, map[string]bool{}
	for _, sess := range stale {
		if sess.keyID != "" {
			keyIDs[sess.keyID] = true
		} else {
			sandboxes[sess.sandbox] = true
		}
	}
	ids := make([]string, 0, len(keyIDs))
	for id := range keyIDs {
		ids = append(ids, id)
	}
	missing, err := ss.keys.MissingKeys(ctx, ids)
	if err != nil {
		return err
	}
	revoked := map[string]bool{}
	for _, id := range missing {
		revoked[id] = true
	}
	tokens := map[string]string{} // the sandboxes' agent tokens now; "" for none
	for id := range sandboxes {
		if ss.sb == nil {
			break
		}
		_, token, err := ss.sb.AgentAccess(ctx, id)
		if err != nil && !api.IsCode(err, api.CodeNotFound) {
			return err
		}
		tokens[id] = token
	}
	for _, sess := range stale {
		if sess.keyID != "" && revoked[sess.keyID] || sess.keyID == "" && tokens[sess.sandbox] != sess.token {
			gone[sess] = true
		}
	}
	ss.mu.Lock()
	for _, sess := range stale {
		if !gone[sess] {
			sess.checked = max(sess.checked, n)
		}
	}
	ss.mu.Unlock()
	ss.revoke(func(sess *session) bool { return gone[sess] })
	return nil
}

// connKey is the context key of a request's client connection (net.Conn),
// which HTTPServer's ConnContext records.
type connKey struct{}

// rotateAgentTokens answers POST /v1/tenants/{tenant}/rotate-agent-tokens:
// every sandbox of the tenant gets a new agent token, and what the old
// ones opened ends.
func (s *Server) rotateAgentTokens(w http.ResponseWriter, r *http.Request) error {
	tenant := r.PathValue("tenant")
	if !tenantName.MatchString(tenant) {
		return api.Errorf(api.CodeBadRequest, "no tenant can be called %q", tenant)
	}
	ids, err := s.keys.RotateAgentTokens(r.Context(), tenant)
	if err != nil {
		return err
	}
	s.sessions.revokeAgentTokens(ids)
	if ids == nil {
		ids = []string{}
	}
	return writeJSON(w, http.StatusOK, api.RotateAgentTokensResult{Tenant: tenant, Sandboxes: ids})
}
