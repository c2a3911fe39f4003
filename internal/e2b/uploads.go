package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"warren/api"
	"warren/internal/archive"
	"warren/internal/ident"
)

// What E2B's template builds hold between their request and the moment
// their build takes their files: every bound a tenant meets here, with
// docs/E2B.md saying the same.
//
// The files wait on disk, never in memory: each upload is written, as it
// is read, to a file of its own under Options.Dir, unlinked as soon as it
// is made (nothing is left behind when the daemon stops). Their bytes are
// charged before they are read, so no set of concurrent uploads passes a
// bound: an upload reserves what its Content-Length says (the room left,
// without one), is read within it, and gives back what it did not use.
const (
	// maxWaiting and maxWaitingPerTenant bound the builds waiting for
	// their files and their trigger: on the server, and of one tenant.
	maxWaiting          = 64
	maxWaitingPerTenant = 8
	// maxRecordsPerTenant bounds one tenant's builds, waiting or
	// triggered: a triggered build is kept, without its files, to answer
	// its status; a new build forgets the tenant's oldest triggered one.
	maxRecordsPerTenant = 64
	// keepFor is how long a triggered build's status is answered.
	keepFor = time.Hour
	// maxFilesPerBuild bounds a build's COPY files: each has one upload
	// token, given again to every request for its link until it is used.
	maxFilesPerBuild = 128
	// A build's files are at most api.MaxTemplateContext, and so is its
	// context (the files joined, gzip undone); maxTenantFiles bounds one
	// tenant's files and contexts, all its builds together, and
	// maxPendingFiles the server's.
	maxTenantFiles  = 128 << 20
	maxPendingFiles = 256 << 20
	// minCharge is the least a file held counts against those bounds, so
	// that they bound the files open too: at most 1,024 on the server.
	minCharge = 256 << 10
	// uploadTimeout bounds the reading of one upload's body.
	uploadTimeout = 10 * time.Minute
)

// waitFor is how long a build waits, idle (no request, no upload in
// flight), for its trigger; then it is forgotten with its files. A
// variable for tests.
var waitFor = 10 * time.Minute

// pendingBuild is an E2B build requested and not yet done. Its fields are
// guarded by pending.mu.
type pendingBuild struct {
	key       [32]byte // sha256 of the caller's API key: only it goes on
	tenant    string   // whose share of the server's bytes it takes
	name      string
	made      time.Time
	last      time.Time           // of its last request, upload or trigger
	timer     *time.Timer         // drops it once idle past waitFor, before its trigger
	files     map[string]*spooled // uploaded, by E2B's files hash
	tokens    map[string]string   // files hash → its upload token
	uploading int                 // uploads in flight
	held      int64               // charged for its files, uploads in flight and context
	ref       string              // the warren version, NAME@VERSION, once one is made
	building  bool                // the trigger came: the files are the build's
	err       string              // why it failed before a version was
}

// pending are the builds in between.
type pending struct {
	dir string // where files wait; "" is os.TempDir()

	mu      sync.Mutex
	builds  map[string]*pendingBuild // by build ID
	bytes   int64                    // charged, every build's together
	tenants map[string]int64         // charged, by tenant
}

// spooled is a file of a tenant's bytes waiting on disk, already
// unlinked: it is gone once closed.
type spooled struct {
	f       *os.File
	size    int64
	charged int64 // what it counts against the bounds
}

func (p *pending) spool() (*spooled, error) {
	f, err := os.CreateTemp(p.dir, "e2b-")
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	return &spooled{f: f}, nil
}

func (s *spooled) reader() *io.SectionReader { return io.NewSectionReader(s.f, 0, s.size) }

// chargeLocked counts n more bytes held for b, unless that passes its
// tenant's share or the server's bound.
func (p *pending) chargeLocked(b *pendingBuild, n int64) error {
	if p.tenants[b.tenant]+n > maxTenantFiles {
		return errorf(http.StatusTooManyRequests, "a tenant's E2B template files (uploads, and contexts waiting for their build) are at most %s at once: trigger the builds that hold them, or wait %v for the untriggered to be dropped", archive.Size(maxTenantFiles), waitFor)
	}
	if p.bytes+n > maxPendingFiles {
		return errorf(http.StatusServiceUnavailable, "E2B template files waiting on this server are at most %s at once: try again in a few minutes", archive.Size(maxPendingFiles))
	}
	if p.tenants == nil {
		p.tenants = map[string]int64{}
	}
	p.tenants[b.tenant] += n
	p.bytes += n
	b.held += n
	return nil
}

func (p *pending) refundLocked(b *pendingBuild, n int64) {
	p.tenants[b.tenant] -= n
	if p.tenants[b.tenant] == 0 {
		delete(p.tenants, b.tenant)
	}
	p.bytes -= n
	b.held -= n
}

// release closes s, one of b's files, and gives back its charge.
func (p *pending) release(b *pendingBuild, s *spooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(b, s)
}

func (p *pending) releaseLocked(b *pendingBuild, s *spooled) {
	s.f.Close()
	p.refundLocked(b, s.charged)
}

// sweepLocked forgets the builds idle past waitFor before their trigger
// (their files with them), and triggered builds that hold nothing after
// keepFor.
func (p *pending) sweepLocked(now time.Time) {
	for id, b := range p.builds {
		switch {
		case !b.building && b.uploading == 0 && now.Sub(b.last) > waitFor:
			p.dropLocked(id, b)
		case b.building && b.held == 0 && now.Sub(b.last) > keepFor:
			delete(p.builds, id)
		}
	}
}

// expire is build id's timer: it drops the build if it is still waiting
// and idle past waitFor, and looks again when it would be otherwise.
func (p *pending) expire(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.builds[id]
	if b == nil || b.building {
		return
	}
	idle := time.Since(b.last)
	if b.uploading == 0 && idle > waitFor {
		p.dropLocked(id, b)
		return
	}
	b.timer.Reset(max(waitFor-idle, 0) + time.Second)
}

// dropLocked forgets build id, waiting for its trigger, and its files.
func (p *pending) dropLocked(id string, b *pendingBuild) {
	b.timer.Stop()
	for _, f := range b.files {
		p.releaseLocked(b, f)
	}
	b.files = nil
	delete(p.builds, id)
}

// admitLocked makes room for a new build of tenant's: it counts the
// builds waiting and forgets the tenant's oldest triggered one when it has
// maxRecordsPerTenant.
func (p *pending) admitLocked(tenant string) error {
	waiting, mine, records := 0, 0, 0
	var oldest string
	for id, b := range p.builds {
		if !b.building {
			waiting++
		}
		if b.tenant != tenant {
			continue
		}
		records++
		if !b.building {
			mine++
		} else if b.held == 0 && (oldest == "" || b.made.Before(p.builds[oldest].made)) {
			oldest = id
		}
	}
	if waiting >= maxWaiting || mine >= maxWaitingPerTenant {
		return errorf(http.StatusTooManyRequests, "too many template builds waiting for their files (%d of a tenant, %d on the server): trigger or wait for one", maxWaitingPerTenant, maxWaiting)
	}
	if records >= maxRecordsPerTenant {
		if oldest == "" {
			return errorf(http.StatusTooManyRequests, "too many template builds handing their files to warren: wait for one")
		}
		delete(p.builds, oldest)
	}
	return nil
}

// Close drops every build's files. Builds that go on give theirs back
// when they end.
func (h *Handler) Close() {
	p := &h.builds
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, b := range p.builds {
		if !b.building {
			p.dropLocked(id, b)
		}
		delete(p.builds, id)
	}
}

// tenant names the caller's tenant: Options.Tenant's answer, or the hash
// of its key when there is none.
func (h *Handler) tenant(r *http.Request) (string, error) {
	if h.opts.Tenant != nil {
		// The key was taken already: an error here is the server's.
		t, err := h.opts.Tenant(r)
		if err != nil {
			return "", fmt.Errorf("the tenant of a key: %w", err)
		}
		return t, nil
	}
	k := keyHash(r)
	return hex.EncodeToString(k[:]), nil
}

func keyHash(r *http.Request) [32]byte {
	k := r.Header.Get("X-API-Key")
	if k == "" {
		k = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	return sha256.Sum256([]byte(k))
}

// build returns the caller's build id of template name (any build of the
// caller's of name waiting for its files, the newest, when id is "").
func (p *pending) build(r *http.Request, name, id string) (*pendingBuild, string, error) {
	k := keyHash(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepLocked(time.Now())
	if id != "" {
		b := p.builds[id]
		if b == nil || subtle.ConstantTimeCompare(b.key[:], k[:]) != 1 || b.name != name {
			return nil, "", errorf(http.StatusNotFound, "build %s of template %s not found", id, name)
		}
		return b, id, nil
	}
	var newest *pendingBuild
	for bid, b := range p.builds {
		if b.name == name && subtle.ConstantTimeCompare(b.key[:], k[:]) == 1 && !b.building && (newest == nil || b.made.After(newest.made)) {
			newest, id = b, bid
		}
	}
	if newest == nil {
		return nil, "", errorf(http.StatusNotFound, "no build of template %s is waiting for its files", name)
	}
	return newest, id, nil
}

// fileLink answers GET /templates/{id}/files/{hash}: where to upload a
// COPY step's files, unless they are there. The files of a build have one
// upload token each, the same for every request until an upload uses it.
func (h *Handler) fileLink(w http.ResponseWriter, r *http.Request, name, hash string) error {
	if !validHash(hash) {
		return errorf(http.StatusBadRequest, "files hash %q: want hex", hash)
	}
	b, _, err := h.builds.build(r, name, "")
	if err != nil {
		return err
	}
	h.builds.mu.Lock()
	b.last = time.Now()
	_, present := b.files[hash]
	token, minted := b.tokens[hash]
	switch {
	case b.building:
		err = errorf(http.StatusConflict, "the build of template %s was started already", name)
	case present || minted:
	case len(b.files)+len(b.tokens)+b.uploading >= maxFilesPerBuild:
		err = errorf(http.StatusTooManyRequests, "a build has at most %d COPY files", maxFilesPerBuild)
	default:
		token = ident.New("up-")
		b.tokens[hash] = token
	}
	h.builds.mu.Unlock()
	if err != nil {
		return err
	}
	if present {
		writeJSON(w, http.StatusOK, map[string]any{"present": true})
		return nil
	}
	u := url.URL{Scheme: "http", Host: r.Host, Path: strings.TrimSuffix(r.URL.Path, "/"), RawQuery: "token=" + token}
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		u.Scheme = "https"
	}
	writeJSON(w, http.StatusOK, map[string]any{"present": false, "url": u.String()})
	return nil
}

func validHash(h string) bool {
	return h != "" && len(h) <= 128 && strings.Trim(h, "0123456789abcdef") == ""
}

// upload answers PUT /templates/{id}/files/{hash}?token=T: the files of a
// COPY step, a tar (gzipped or not), with the token fileLink gave. The
// token is used up as the upload starts; what the upload may hold is
// charged before its body is read.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, name, hash string) error {
	p := &h.builds
	token := r.URL.Query().Get("token")
	p.mu.Lock()
	var b *pendingBuild
	for _, c := range p.builds {
		if got, ok := c.tokens[hash]; ok && token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 && c.name == name {
			b = c
		}
	}
	if b == nil {
		p.mu.Unlock()
		return errorf(http.StatusForbidden, "no upload of these files was asked for with this token")
	}
	// Reserve what the body may be: its length, or all the room left.
	n := r.ContentLength
	if n < 0 {
		n = min(api.MaxTemplateContext-b.held, maxTenantFiles-p.tenants[b.tenant], maxPendingFiles-p.bytes)
	}
	n = max(n, minCharge)
	err := errorf(http.StatusRequestEntityTooLarge, "a build's files are at most %s", archive.Size(api.MaxTemplateContext))
	if b.held+n <= api.MaxTemplateContext {
		err = p.chargeLocked(b, n)
	}
	if err != nil {
		p.mu.Unlock()
		return err
	}
	delete(b.tokens, hash)
	b.uploading++
	p.mu.Unlock()

	f, err := h.receive(w, r, n)
	p.mu.Lock()
	defer p.mu.Unlock()
	b.uploading--
	b.last = time.Now()
	p.refundLocked(b, n)
	if err != nil {
		return err
	}
	// What it holds now is within what was reserved: charging it passes
	// no bound.
	f.charged = max(f.size, minCharge)
	p.chargeLocked(b, f.charged)
	if old := b.files[hash]; old != nil {
		p.releaseLocked(b, old)
	}
	b.files[hash] = f
	w.WriteHeader(http.StatusOK)
	return nil
}

// receive writes r's body, at most n bytes, to a spooled file.
func (h *Handler) receive(w http.ResponseWriter, r *http.Request, n int64) (*spooled, error) {
	f, err := h.builds.spool()
	if err != nil {
		return nil, err
	}
	// A server that cannot set the deadline (an http.ResponseWriter that
	// does not unwrap) reads without it.
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(uploadTimeout))
	f.size, err = io.Copy(f.f, io.LimitReader(r.Body, n+1))
	switch {
	case err != nil:
		f.f.Close()
		return nil, errorf(http.StatusBadRequest, "read the upload: %v", err)
	case f.size > n:
		f.f.Close()
		return nil, errorf(http.StatusRequestEntityTooLarge, "a build's files are at most %s (%s of a tenant's, %s on the server, at once)", archive.Size(api.MaxTemplateContext), archive.Size(maxTenantFiles), archive.Size(maxPendingFiles))
	}
	return f, nil
}
