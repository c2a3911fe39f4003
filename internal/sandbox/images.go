package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"warren/api"
	"warren/internal/ident"
	"warren/internal/runtime"
	"warren/internal/store"
)

// Memory images (docs/API.md, "Memory starts"). A vm sandbox starts by
// restoring a booted machine rather than booting one. An image is one
// machine of a template and shape (vCPUs, memory, network or none),
// booted, its agent answering, the first exec's files read into its page
// cache, then saved: its memory file, and its disk, of which each sandbox
// started from it gets a clone. It ran nothing but its agent, and each
// sandbox restored from it gets its own identity from the node before
// anything runs in it: ID, hostname, machine ID, the host's time and a seed
// for the kernel's generator (boot's Init).
//
// The node prepares an image in the background once a second vm sandbox
// of its shape has booted (a shape asked for once is not worth one), one
// image at a time; until it is ready, creates boot. Warm pools' members start from images too, so a vm pool refills
// from memory (the hybrid of DESIGN.md 2.3). Images live as long as the
// daemon: it removes them at start and at close, since an image holds the
// agent, guest kernel and QEMU state of the build that saved it. At most
// maxImages are kept, the least recently used removed first.

const (
	// maxImages bounds the node's images: each holds a memory file of
	// about what its guest used (tens to hundreds of MiB) and a disk clone.
	maxImages = 4
	// imageRetry is how long a shape whose image failed waits before the
	// node tries again.
	imageRetry = time.Minute
	// seedBytes is the random seed a restored guest gets.
	seedBytes = 64
	// imageBoots is how many sandboxes of a shape boot before the node
	// prepares its image; maxShapes bounds the shapes whose boots it counts.
	imageBoots = 2
	maxShapes  = 1024
)

// imageKey is what a sandbox must share with an image to start from it.
type imageKey struct {
	runtime  string // an image is its runtime's own (a vm's memory, a gvisor checkpoint)
	template string
	built    int64 // the template's build, BuiltAt in Unix nanoseconds
	vcpus    int
	memoryMB int64
	network  bool
}

// image is a prepared memory image, or one being prepared.
type image struct {
	key          imageKey
	disk, memory string
	ready        bool
	users        int // starts cloning its disk or reading its memory
	used         time.Time
	starts       int64
	bytes        int64 // its memory file's, as allocated
	failedAt     time.Time
}

// images are the node's memory images.
type images struct {
	dir string

	mu        sync.Mutex
	byKey     map[imageKey]*image
	boots     map[imageKey]int // boots of shapes with no image
	preparing bool
	// next is a shape whose boots called for its image while another was
	// being prepared (the latest such): it is prepared next.
	next   *nextImage
	closed bool
	wg     sync.WaitGroup
}

// nextImage is a shape to prepare once the image being prepared is.
type nextImage struct {
	rt  runtime.Runtime
	key imageKey
	src source
}

func newImages(dir string) (*images, error) {
	// An earlier daemon's images were saved under its build.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("memory images: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("memory images: %w", err)
	}
	return &images{dir: dir, byKey: map[imageKey]*image{}, boots: map[imageKey]int{}}, nil
}

// close waits for a preparation under way and removes every image.
func (is *images) close() {
	is.mu.Lock()
	is.closed = true
	is.mu.Unlock()
	is.wg.Wait()
	os.RemoveAll(is.dir)
}

// imageKeyOf is the image validated sandbox rec, in runtime rt from src,
// may start from; ok is false when it may start from none: its runtime
// saves no images, or its disk is not its template's as it is (a snapshot,
// a bigger disk, a workspace disk), which a saved guest would not see.
func (m *Manager) imageKeyOf(rt runtime.Runtime, rec store.Sandbox, src source) (imageKey, bool) {
	if _, ok := rt.(runtime.Imager); !ok || m.images == nil {
		return imageKey{}, false
	}
	if src.origin != "" || src.built.IsZero() || rec.WorkspaceMB > 0 || rec.DiskMB<<20 > src.size || alwaysOn(&rec) {
		return imageKey{}, false
	}
	return imageKey{
		runtime: rt.Name(), template: src.template, built: src.built.UnixNano(),
		vcpus: max(1, int(math.Ceil(rec.CPUs))), memoryMB: rec.MemoryMB, network: m.deps.Network != nil,
	}, true
}

// takeImage returns the ready image of key, held for a start until
// releaseImage, or nil.
func (m *Manager) takeImage(key imageKey) *image {
	is := m.images
	is.mu.Lock()
	defer is.mu.Unlock()
	img := is.byKey[key]
	if img == nil || !img.ready {
		return nil
	}
	img.users++
	img.used = time.Now()
	return img
}

// releaseImage ends a start's hold on img; a start that failed drops it,
// so that the next start boots and a new image is prepared.
func (m *Manager) releaseImage(img *image, failed bool) {
	is := m.images
	is.mu.Lock()
	defer is.mu.Unlock()
	img.users--
	if failed {
		img.ready, img.failedAt = false, time.Now()
	} else {
		img.starts++
	}
	if !img.ready && img.users == 0 {
		img.remove()
	}
}

func (img *image) remove() {
	os.Remove(img.disk)
	os.RemoveAll(img.memory)
}

// booted counts a boot of a sandbox of key's shape and, from the
// imageBoots-th, prepares the image of key in the background, unless it
// exists or failed lately. One is prepared at a time: a shape that calls
// for its image meanwhile is prepared after (the latest such). The
// sandbox that booted is up: the preparation does not compete with its
// boot.
func (m *Manager) booted(rt runtime.Runtime, key imageKey, src source) {
	is := m.images
	is.mu.Lock()
	defer is.mu.Unlock()
	if len(is.boots) >= maxShapes {
		clear(is.boots)
	}
	is.boots[key]++
	if is.closed || is.boots[key] < imageBoots {
		return
	}
	if is.preparing {
		is.next = &nextImage{rt: rt, key: key, src: src}
		return
	}
	m.prepareLocked(rt, key, src)
}

// prepareLocked prepares the image of key in the background unless it
// exists or failed lately. images.mu is held, and no image is being
// prepared.
func (m *Manager) prepareLocked(rt runtime.Runtime, key imageKey, src source) {
	is := m.images
	if old := is.byKey[key]; old != nil && (old.ready || time.Since(old.failedAt) < imageRetry) {
		return
	}
	delete(is.boots, key)
	if len(is.byKey) >= maxImages && !is.evictLocked() {
		return
	}
	name := fmt.Sprintf("%s-%dc-%dm-%d", key.template, key.vcpus, key.memoryMB, time.Now().UnixNano())
	img := &image{key: key, disk: filepath.Join(is.dir, name+".img"), memory: filepath.Join(is.dir, name+".mem")}
	is.byKey[key] = img
	is.preparing = true
	is.wg.Add(1)
	go func() {
		defer is.wg.Done()
		t0 := time.Now()
		err := m.prepareImage(rt, img, src)
		is.mu.Lock()
		is.preparing = false
		if err != nil {
			img.failedAt = time.Now()
		} else {
			img.ready, img.used, img.bytes = true, time.Now(), allocated(img.memory)
		}
		if n := is.next; n != nil && !is.closed {
			is.next = nil
			m.prepareLocked(n.rt, n.key, n.src)
		}
		is.mu.Unlock()
		if err != nil {
			img.remove()
			m.log.Warn("memory image not prepared", "template", key.template, "vcpus", key.vcpus, "memory_mb", key.memoryMB, "err", err)
			return
		}
		m.log.Info("memory image ready", "template", key.template, "vcpus", key.vcpus, "memory_mb", key.memoryMB,
			"bytes", img.bytes, "took", time.Since(t0))
	}()
}

// evictLocked removes the least recently used image that no start holds
// (a failed one first); false when there is none. images.mu is held.
func (is *images) evictLocked() bool {
	var lru *image
	for _, img := range is.byKey {
		if img.users > 0 || (!img.ready && img.failedAt.IsZero()) {
			continue
		}
		if lru == nil || img.used.Before(lru.used) {
			lru = img
		}
	}
	if lru == nil {
		return false
	}
	delete(is.byKey, lru.key)
	lru.remove()
	return true
}

// prepareImage boots a machine of img's key, reads the first exec's files
// into its page cache, and saves it as img. The machine is a warm pool's
// kind of sandbox meanwhile: claimed of the node, marked for a restarted
// daemon to sweep, shown to nobody.
func (m *Manager) prepareImage(rt runtime.Runtime, img *image, src source) (err error) {
	if err := m.CheckDiskFree("memory images are"); err != nil {
		return err
	}
	k := img.key
	rec := store.Sandbox{
		ID: ident.New("sb-"), Tenant: pooled, Template: k.template, Runtime: rt.Name(), State: api.StateStarting,
		CPUs: float64(k.vcpus), MemoryMB: k.memoryMB, Pids: m.cfg.DefaultPids, DiskMB: (src.size + 1<<20 - 1) >> 20,
	}
	if err := m.ledger.admit([]string{rec.ID}, claimOf(rec)); err != nil {
		return err
	}
	defer m.ledger.release(rec.ID)
	marker := m.pooledMarker(rec.ID)
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return fmt.Errorf("image marker: %w", err)
	}
	defer os.Remove(marker)
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StartTimeout)
	defer cancel()
	b, err := m.bootFrom(ctx, rt, &rec, src, nil)
	if err != nil {
		return err
	}
	defer b.undo.Run()
	warmFiles(ctx, b.conn)
	if err := rt.(runtime.Imager).SaveImage(ctx, b.inst, img.memory); err != nil {
		return err
	}
	return os.Rename(m.diskPath(rec.ID), img.disk)
}

// allocated is the bytes path (a file, or a directory of them: a gvisor
// sandbox's image) takes on its filesystem.
func allocated(path string) int64 {
	var n int64
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// Images lists the node's memory images, ready or being prepared.
func (m *Manager) Images() []api.MemoryImage {
	if m.images == nil {
		return nil
	}
	is := m.images
	is.mu.Lock()
	defer is.mu.Unlock()
	out := []api.MemoryImage{}
	for _, img := range is.byKey {
		state := "preparing"
		switch {
		case img.ready:
			state = "ready"
		case !img.failedAt.IsZero():
			state = "failed"
		}
		out = append(out, api.MemoryImage{
			Runtime: img.key.runtime, Template: img.key.template, TemplateBuiltAt: time.Unix(0, img.key.built).UTC(),
			VCPUs: img.key.vcpus, MemoryMB: img.key.memoryMB, Network: img.key.network,
			State: state, Bytes: img.bytes, Starts: img.starts,
		})
	}
	slices.SortFunc(out, func(a, b api.MemoryImage) int {
		return cmp.Or(cmp.Compare(a.Runtime, b.Runtime), cmp.Compare(a.Template, b.Template), cmp.Compare(a.VCPUs, b.VCPUs), cmp.Compare(a.MemoryMB, b.MemoryMB))
	})
	return out
}

// newMachineID is a sandbox's /etc/machine-id: 128 random bits in hex.
func newMachineID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newSeed is a restored guest's seed for its kernel's generator.
func newSeed() []byte {
	b := make([]byte, seedBytes)
	rand.Read(b)
	return b
}
