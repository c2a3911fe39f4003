// Package blockserver is the node's block server process (`warren
// block-server`): it holds the node's always-on volumes (package blockdev)
// and serves each through its front end, a file in a FUSE mount or an NBD
// socket. It runs apart from the daemon and outlives it, so that a daemon
// restart leaves every always-on disk attached; the daemon drives it over a
// unix socket in the data directory (Client).
//
// It does not know sandboxes: the daemon names the volumes, and decides
// when to serve, snapshot and forget them.
package blockserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"warren/internal/blockdev"
	"warren/internal/chunkstore"
)

// The block server's files in the node's data directory.
const (
	sockFile = "block-server.sock"
	lockFile = "block-server.lock"
	logFile  = "block-server.log"
	volsDir  = "volumes"
)

// Volume directory layout: DATA/volumes/<id>/{vol/, front, mnt/, nbd.sock}.
const (
	volDir    = "vol"      // the volume's state (blockdev)
	frontFile = "front"    // the front end it is served through
	mountDir  = "mnt"      // FrontFile's mount point
	nbdSock   = "nbd.sock" // FrontNBD's socket
)

// Config configures a block server.
type Config struct {
	DataDir string
	// Tiers are the stores the volumes' layers go to.
	Tiers blockdev.Tiers
	// Volume tunes every volume.
	Volume blockdev.Options
	Log    *slog.Logger
}

// Server serves a node's volumes.
type Server struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex // guards vols and each served's setup
	vols map[string]*served
}

// served is a volume and its front end.
type served struct {
	vol   *blockdev.Volume
	front string
	path  string
	stop  func() error // stops the front end
}

// New makes a server of the volumes in cfg.DataDir; Serve serves them.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Volume.Log = cfg.Log
	return &Server{cfg: cfg, log: cfg.Log, vols: map[string]*served{}}
}

// Resume serves again every volume whose state is in the data directory,
// each through the front end it had. A volume that fails stays unserved,
// logged; the daemon sees it missing.
func (s *Server) Resume(ctx context.Context) {
	entries, err := os.ReadDir(filepath.Join(s.cfg.DataDir, volsDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Error("resume volumes", "err", err)
		return
	}
	for _, e := range entries {
		front, err := os.ReadFile(filepath.Join(s.cfg.DataDir, volsDir, e.Name(), frontFile))
		if err != nil {
			continue // never served: its request failed half-way
		}
		if _, err := s.serve(ctx, e.Name(), VolumeRequest{Front: string(front)}); err != nil {
			s.log.Error("resume volume", "volume", e.Name(), "err", err)
		}
	}
}

// Serve answers the daemon on the unix socket in the data directory until
// ctx is done, then detaches every front end and closes every volume
// (flushed, and written back to object storage).
func (s *Server) Serve(ctx context.Context, ready func()) error {
	path := filepath.Join(s.cfg.DataDir, sockFile)
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("block server: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("block server: %w", err)
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if ready != nil {
		ready()
	}
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, s.closeAll())
}

// closeAll stops serving every volume, keeping its state.
func (s *Server) closeAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for id, sv := range s.vols {
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		errs = append(errs, sv.close(ctx))
		cancel()
		delete(s.vols, id)
	}
	return errors.Join(errs...)
}

// closeWait bounds the write-back of one volume as it is closed.
const closeWait = 2 * time.Minute

func (sv *served) close(ctx context.Context) error {
	return errors.Join(sv.stop(), sv.vol.Close(ctx))
}

func (s *Server) volDir(id string) string { return filepath.Join(s.cfg.DataDir, volsDir, id) }

// serve serves volume id, as VolumeRequest says.
func (s *Server) serve(ctx context.Context, id string, req VolumeRequest) (VolumeInfo, error) {
	if req.Front != FrontFile && req.Front != FrontNBD {
		return VolumeInfo{}, badRequest("front %q: want %q or %q", req.Front, FrontFile, FrontNBD)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv, ok := s.vols[id]; ok {
		if sv.front != req.Front {
			return VolumeInfo{}, conflict("volume %s is served through %s", id, sv.front)
		}
		return info(id, sv), nil
	}
	dir := s.volDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return VolumeInfo{}, err
	}
	var vol *blockdev.Volume
	var err error
	state := filepath.Join(dir, volDir)
	switch _, statErr := os.Stat(state); {
	case statErr == nil:
		vol, err = blockdev.Open(ctx, state, s.cfg.Tiers, s.cfg.Volume)
	case !errors.Is(statErr, os.ErrNotExist):
		err = statErr
	case req.Recover:
		vol, err = blockdev.Recover(ctx, state, id, s.cfg.Tiers, s.cfg.Volume)
	default:
		vol, err = blockdev.Create(ctx, state, blockdev.Config{ID: id, Base: req.Base, Size: req.SizeBytes}, s.cfg.Tiers, s.cfg.Volume)
	}
	if err != nil {
		return VolumeInfo{}, fmt.Errorf("volume %s: %w", id, err)
	}
	sv := &served{vol: vol, front: req.Front}
	if sv.path, sv.stop, err = attach(dir, req.Front, vol, s.log.With("volume", id)); err == nil {
		err = os.WriteFile(filepath.Join(dir, frontFile), []byte(req.Front), 0o600)
	}
	if err != nil {
		if sv.stop != nil {
			sv.stop()
		}
		vol.Close(ctx)
		return VolumeInfo{}, fmt.Errorf("volume %s: %w", id, err)
	}
	s.vols[id] = sv
	s.log.Info("volume served", "volume", id, "front", req.Front, "path", sv.path)
	return info(id, sv), nil
}

// drop stops serving volume id and removes its state on the node; with
// tiers, its layers in the tiers too (snapshots taken of it stay), else
// they stay for another node to recover it from.
func (s *Server) drop(ctx context.Context, id string, tiers bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv, ok := s.vols[id]; ok {
		if err := sv.stop(); err != nil {
			return err
		}
		// Its writes need not reach the tiers: it is gone from here.
		sv.vol.Abandon()
		delete(s.vols, id)
	}
	if err := clearMount(s.volDir(id)); err != nil {
		return err
	}
	if !tiers {
		return os.RemoveAll(s.volDir(id))
	}
	for _, t := range []*chunkstore.Store{s.cfg.Tiers.Cluster, &s.cfg.Tiers.Object} {
		if t == nil {
			continue
		}
		if err := blockdev.DeleteLayers(ctx, *t, id); err != nil {
			return err
		}
	}
	return os.RemoveAll(s.volDir(id))
}

func info(id string, sv *served) VolumeInfo {
	st := sv.vol.Status()
	in := VolumeInfo{
		ID: id, Front: sv.front, Path: sv.path, SizeBytes: sv.vol.Size(), Layer: st.Layer, Replicated: st.Replicated,
		DirtyBytes: int64(st.Dirty) * blockdev.CellSize, CachedBytes: int64(st.Present) * blockdev.CellSize,
		DurableBytes: st.Durable, DurableLimitBytes: st.Limit, UsedBytes: st.Used, Refused: st.Refused,
	}
	if !st.RecoveryPoint.IsZero() {
		in.RecoveryPoint = &st.RecoveryPoint
	}
	return in
}

func (s *Server) lookup(id string) (*served, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.vols[id]
	if !ok {
		return nil, notFound("volume %s is not served", id)
	}
	return sv, nil
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		out := make([]VolumeInfo, 0, len(s.vols))
		for id, sv := range s.vols {
			out = append(out, info(id, sv))
		}
		s.mu.Unlock()
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		reply(w, out, nil)
	})
	mux.HandleFunc("PUT /v1/volumes/{id}", func(w http.ResponseWriter, r *http.Request) {
		var req VolumeRequest
		err := decode(r, &req)
		if err == nil {
			err = validID(r.PathValue("id"))
		}
		if err != nil {
			reply(w, nil, err)
			return
		}
		in, err := s.serve(r.Context(), r.PathValue("id"), req)
		reply(w, in, err)
	})
	mux.HandleFunc("GET /v1/volumes/{id}", func(w http.ResponseWriter, r *http.Request) {
		sv, err := s.lookup(r.PathValue("id"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, info(r.PathValue("id"), sv), nil)
	})
	mux.HandleFunc("POST /v1/volumes/{id}/flush", func(w http.ResponseWriter, r *http.Request) {
		sv, err := s.lookup(r.PathValue("id"))
		if err == nil {
			err = sv.vol.Flush()
		}
		if err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, info(r.PathValue("id"), sv), nil)
	})
	mux.HandleFunc("POST /v1/volumes/{id}/grow-fs", func(w http.ResponseWriter, r *http.Request) {
		sv, err := s.lookup(r.PathValue("id"))
		if err == nil {
			err = growFS(s.volDir(r.PathValue("id")), sv.vol, s.log)
		}
		if err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, info(r.PathValue("id"), sv), nil)
	})
	mux.HandleFunc("POST /v1/volumes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		var req SnapshotRequest
		sv, err := s.lookup(r.PathValue("id"))
		if err == nil {
			err = decode(r, &req)
		}
		if err != nil {
			reply(w, nil, err)
			return
		}
		t0 := time.Now()
		m, err := sv.vol.Snapshot(r.Context(), req.ID, req.Labels)
		if err != nil {
			reply(w, nil, err)
			return
		}
		s.log.Info("snapshot written", "volume", r.PathValue("id"), "snapshot", m.ID, "cells", len(m.Extents), "took", time.Since(t0))
		reply(w, SnapshotInfo{ID: m.ID, Parent: m.Parent, SizeBytes: m.DiskSize}, nil)
	})
	mux.HandleFunc("DELETE /v1/volumes/{id}", func(w http.ResponseWriter, r *http.Request) {
		err := validID(r.PathValue("id"))
		if err == nil {
			err = s.drop(r.Context(), r.PathValue("id"), r.URL.Query().Get("keep") != "tiers")
		}
		reply(w, nil, err)
	})
	return mux
}

func validID(id string) error {
	if err := blockdev.ValidID(id); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// maxBody bounds a request's body.
const maxBody = 64 << 10

func decode(r *http.Request, v any) error {
	d := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return badRequest("body: %v", err)
	}
	return nil
}

// httpError is an error with the status it answers.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, a...)}
}
func notFound(format string, a ...any) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf(format, a...)}
}
func conflict(format string, a ...any) error {
	return &httpError{http.StatusConflict, fmt.Sprintf(format, a...)}
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		status := http.StatusInternalServerError
		var he *httpError
		if errors.As(err, &he) {
			status = he.status
		} else if errors.Is(err, blockdev.ErrConflict) {
			status = http.StatusConflict
		}
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(errorBody{Error: err.Error()})
		return
	}
	if v == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	json.NewEncoder(w).Encode(v)
}
