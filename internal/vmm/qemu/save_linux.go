//go:build linux

package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"warren/internal/backoff"
)

// saveFdName is the name the memory-save descriptor gets in QEMU (getfd).
const saveFdName = "warren-save"

// migrationInfo is the part of query-migrate's reply SaveMemory reads.
type migrationInfo struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc"`
}

// SaveMemory implements vmm.Machine.
func (m *Machine) SaveMemory(ctx context.Context, path string, durable bool) (err error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	defer func() {
		if err != nil {
			err = fmt.Errorf("save memory: %w", err)
		}
	}()
	if err := m.call(ctx, "stop", nil, nil); err != nil {
		return err
	}
	if !m.migrationSet {
		// Events, so that the wait below wakes on MIGRATION; no bandwidth
		// cap (QEMU's default is 32 MiB/s, meant for live migration over
		// a network shared with the running guest).
		caps := map[string]any{"capabilities": []map[string]any{{"capability": "events", "state": true}}}
		if err := m.call(ctx, "migrate-set-capabilities", caps, nil); err != nil {
			return err
		}
		if err := m.call(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}, nil); err != nil {
			return err
		}
		m.migrationSet = true
	}

	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		f.Close()
		if err != nil {
			os.Remove(tmp)
		}
	}()
	events, unsub := m.qmp.Subscribe(16)
	defer unsub()
	gctx, cancel := context.WithTimeout(ctx, callTimeout)
	err = m.explain(m.qmp.ExecuteWithFile(gctx, "getfd", map[string]string{"fdname": saveFdName}, f, nil))
	cancel()
	if err != nil {
		return err
	}
	if err := m.call(ctx, "migrate", map[string]string{"uri": "fd:" + saveFdName}, nil); err != nil {
		m.qmp.Execute(context.WithoutCancel(ctx), "closefd", map[string]string{"fdname": saveFdName}, nil)
		return err
	}
	if err := m.waitMigration(ctx, events); err != nil {
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	return syncDir(filepath.Dir(path))
}

// waitMigration waits for an outgoing migration to complete, waking on
// MIGRATION events and polling query-migrate, and then for the machine to
// leave the finish-migrate run state: QEMU reports the migration completed
// a moment before its cleanup moves the machine on to postmigrate, and a
// cont in between fails ("Migration is not finalized yet"). If ctx ends
// first it cancels the migration.
func (m *Machine) waitMigration(ctx context.Context, events <-chan Event) error {
	waits := backoff.Backoff{Base: 2 * time.Millisecond, Max: 50 * time.Millisecond}
	for {
		var mig migrationInfo
		if err := m.call(ctx, "query-migrate", nil, &mig); err != nil {
			if ctx.Err() == nil {
				return err
			}
		} else {
			switch mig.Status {
			case "completed":
				return m.waitFinished(ctx)
			case "failed", "cancelled":
				return fmt.Errorf("migration %s: %s", mig.Status, mig.ErrorDesc)
			}
		}
		select {
		case <-events:
		case <-time.After(waits.Next()):
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), quitWait)
			defer cancel()
			if err := m.call(cctx, "migrate_cancel", nil, nil); err != nil {
				m.log.Warn("cancel memory save", "err", err)
			}
			// The file is removed by the caller; QEMU may still hold it
			// open until the cancellation lands, which is harmless.
			return ctx.Err()
		}
	}
}

// waitFinished waits until the machine's run state is no longer
// finish-migrate.
func (m *Machine) waitFinished(ctx context.Context) error {
	return backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}, func() (bool, error) {
		var st struct {
			Status string `json:"status"`
		}
		if err := m.call(ctx, "query-status", nil, &st); err != nil {
			return false, err
		}
		return st.Status != "finish-migrate", nil
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
