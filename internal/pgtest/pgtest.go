// Package pgtest starts a real PostgreSQL server for tests and hands out
// fresh databases on it: Debian's postgresql binaries, initdb into a new
// temporary directory, the server listening on a unix socket in that
// directory only (listen_addresses is empty: no TCP port is taken), with
// durability off for speed. The store's suite and the fleet's end-to-end
// tests use it so that PostgreSQL code is tested against PostgreSQL. It is
// test support only, not a way to run PostgreSQL in production.
//
// It never touches a cluster of the host's own, /var/run/postgresql or the
// system's users: as root, initdb and postgres run as the existing
// unprivileged user nobody (the server refuses to run as root) in a
// directory nobody owns; otherwise as the calling user. The server stops
// when the test ends (Start) or the test binary does (Shared), and also
// when the process that started it dies without cleaning up (a
// parent-death signal).
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"warren/internal/backoff"
)

// ErrUnavailable is wrapped by New's error when the PostgreSQL server's
// binaries are not installed; Start and Shared skip the test then.
var ErrUnavailable = errors.New("PostgreSQL server binaries not found")

const (
	// superuser is the role initdb creates; every DSN connects as it.
	superuser = "postgres"
	// startTimeout bounds the wait for the server to answer (under a
	// second here, after initdb's two) and a CREATE DATABASE (0.3 s); a
	// loaded CI machine is slower.
	startTimeout = 60 * time.Second
	// stopTimeout bounds a fast shutdown before the server is killed.
	stopTimeout = 30 * time.Second
	// maxSocketPath is what a unix socket's path may hold (sun_path, with
	// its terminating NUL).
	maxSocketPath = 107
)

// Server is a running PostgreSQL server that this process owns.
type Server struct {
	dir   string  // holds data/, the socket and postgres.log; removed by Stop
	admin *sql.DB // the postgres database, for CREATE and DROP DATABASE
	n     atomic.Int64

	cmd     *exec.Cmd
	exited  chan struct{} // closed once the server process has exited
	waitErr error         // cmd.Wait's error, set before exited is closed
}

// New starts a server in a new temporary directory and waits until it
// answers. Its error wraps ErrUnavailable when the binaries are missing.
// The caller must Stop it.
func New() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "warren-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{dir: dir, exited: make(chan struct{})}
	if err := s.start(bin, cred); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Start starts a server for t alone and stops it when t ends. It skips t
// when PostgreSQL is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New()
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Shared is one server for every test of a test binary, started by the
// first Database call: each test still gets a database of its own, and
// the binary pays for one initdb. The zero value is ready; TestMain must
// call Stop after m.Run. A Shared is safe for concurrent use.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Database returns the DSN of a new empty database on the shared server,
// dropped when t ends. It skips t when PostgreSQL is not installed.
func (sh *Shared) Database(t testing.TB) string {
	t.Helper()
	sh.once.Do(func() { sh.srv, sh.err = New() })
	if errors.Is(sh.err, ErrUnavailable) {
		t.Skip(sh.err)
	}
	if sh.err != nil {
		t.Fatal(sh.err)
	}
	return sh.srv.Database(t)
}

// Stop stops the shared server, if it was started.
func (sh *Shared) Stop() error {
	sh.once.Do(func() {}) // no server starts after this
	if sh.srv == nil {
		return nil
	}
	return sh.srv.Stop()
}

// DSN is the URL of database on the server, for the pgx driver and
// store.Open: postgres:///DATABASE?host=DIR&user=postgres.
func (s *Server) DSN(database string) string {
	q := url.Values{}
	q.Set("host", s.dir)
	q.Set("user", superuser)
	q.Set("sslmode", "disable")
	return (&url.URL{Scheme: "postgres", Path: "/" + database, RawQuery: q.Encode()}).String()
}

// Database creates a new empty database, drops it when t ends, and
// returns its DSN. Whoever connected to it must have closed their
// connections by then, or be cut off.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d_%s", s.n.Add(1), identPart(t.Name()))
	quoted := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+quoted); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		select {
		case <-s.exited:
			return // stopped first: the database went with the server
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if _, err := s.admin.ExecContext(ctx, "DROP DATABASE "+quoted+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

// identPart is s cut down to the lower-case letters, digits and
// underscores of a database name, at most 40 of them: the name stays
// under PostgreSQL's 63 bytes and says which test made it.
func identPart(s string) string {
	b := []byte(strings.ToLower(s))
	b = slices.DeleteFunc(b, func(c byte) bool {
		return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_')
	})
	return string(b[:min(len(b), 40)])
}

// Stop shuts the server down (fast shutdown: clients are disconnected),
// kills it if it does not exit in time, and removes its directory.
func (s *Server) Stop() error {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-s.exited:
			case <-time.After(stopTimeout):
				s.cmd.Process.Kill()
				<-s.exited
			}
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// start runs initdb and the server as cred (nil: as this process), and
// waits until the server answers.
func (s *Server) start(bin string, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	if n := len(filepath.Join(s.dir, ".s.PGSQL.5432")); n > maxSocketPath {
		return fmt.Errorf("pgtest: the server's socket path in %s would be %d bytes, more than a unix socket takes (%d): set TMPDIR shorter", s.dir, n, maxSocketPath)
	}
	data := filepath.Join(s.dir, "data")
	initdb := s.command(bin, "initdb", cred, "-D", data, "-U", superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	var out bytes.Buffer
	initdb.Stdout, initdb.Stderr = &out, &out
	if err := initdb.Run(); err != nil {
		return fmt.Errorf("pgtest: initdb: %v\n%s", err, bytes.TrimSpace(out.Bytes()))
	}

	logPath := filepath.Join(s.dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer logFile.Close() // the server holds its own copy
	// Durability is off: a test's data need not survive a crash of the
	// machine. The socket is in the private directory; trust
	// authentication (initdb's) is for whoever can reach it: this user,
	// and root.
	s.cmd = s.command(bin, "postgres", cred, "-D", data, "-k", s.dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// If this process dies without Stop, the server gets SIGQUIT (an
	// immediate shutdown) instead of running on.
	s.cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that started the
		// child exits, not the process: this goroutine holds its thread
		// until the server exits, and its thread ends with it.
		runtime.LockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		s.cmd = nil
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}

	cfg, err := pgx.ParseConfig(s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	s.admin = stdlib.OpenDB(*cfg)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err = backoff.Poll(ctx, backoff.Backoff{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond}, func() (bool, error) {
		select {
		case <-s.exited:
			return false, fmt.Errorf("exited before answering: %v", s.waitErr)
		default:
		}
		return s.admin.PingContext(ctx) == nil, nil
	})
	if err != nil {
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("pgtest: postgres in %s: %w\nlog:\n%s", s.dir, err, bytes.TrimSpace(log))
	}
	return nil
}

// command is the PostgreSQL program name in bin, run as cred in the
// server's directory with an environment of its own (no PG* variable of
// the caller's reaches it).
func (s *Server) command(bin, name string, cred *syscall.Credential, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

// binDir finds the directory of initdb and postgres: on PATH, else the
// newest of Debian's /usr/lib/postgresql/VERSION/bin.
func binDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		// The directory the programs are in, not that of a link to them.
		if real, err := filepath.EvalSymlinks(p); err == nil && isExecutable(filepath.Join(filepath.Dir(real), "initdb")) {
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var best string
	bestVersion := -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || v <= bestVersion {
			continue
		}
		if isExecutable(filepath.Join(d, "postgres")) && isExecutable(filepath.Join(d, "initdb")) {
			best, bestVersion = d, v
		}
	}
	if best == "" {
		return "", fmt.Errorf("pgtest: %w (initdb and postgres, on PATH or in /usr/lib/postgresql/*/bin): install Debian's postgresql package (scripts/deps.sh does)", ErrUnavailable)
	}
	return best, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// credential is who runs initdb and postgres: nil (this process's user)
// unless this process is root, which the server refuses; then the
// existing unprivileged user nobody.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("pgtest: as root, the server runs as user nobody: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: uid of nobody: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: gid of nobody: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
