package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/template"
)

// listsMaxAge is how long fetched package lists serve builds before they
// are fetched again.
const listsMaxAge = time.Hour

// fetchDebs resolves pkgs for the Debian release codename against status
// (a dpkg status file: what is installed), with the host's apt, mirror and
// keys, and downloads into work the package files that installing them
// takes; shared keeps each release's package lists between builds. It
// returns the files' paths.
func fetchDebs(ctx context.Context, shared, work, codename string, status []byte, pkgs []string, out func(string)) ([]string, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	rel := filepath.Join(shared, codename)
	lists, parts := filepath.Join(rel, "lists"), filepath.Join(rel, "parts")
	for _, d := range []string{filepath.Join(lists, "partial"), parts, filepath.Join(work, "archives", "partial"), filepath.Join(work, "cache")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	mirror := template.AptMirror(codename)
	sources := fmt.Sprintf("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n", mirror, codename)
	sources += fmt.Sprintf("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s-updates main\n", mirror, codename)
	if sec := template.AptMirror(codename + "-security"); sec != mirror {
		sources += fmt.Sprintf("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s-security main\n", sec, codename)
	}
	sourceList := filepath.Join(rel, "sources.list")
	statusFile := filepath.Join(work, "status")
	if err := os.WriteFile(statusFile, status, 0o644); err != nil {
		return nil, err
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + sourceList, "-o", "Dir::Etc::SourceParts=" + parts,
		"-o", "Dir::State::Lists=" + lists, "-o", "Dir::State::status=" + statusFile,
		"-o", "Dir::Cache=" + filepath.Join(work, "cache"), "-o", "Dir::Cache::archives=" + filepath.Join(work, "archives"),
		"-o", "Debug::NoLocking=true", "-o", "APT::Sandbox::User=root", "-o", "APT::Install-Recommends=false", "-o", "Acquire::Languages=none",
		"-o", "APT::Get::List-Cleanup=false", "-o", "Dir::Etc::Preferences=/dev/null", "-o", "Dir::Etc::PreferencesParts=" + parts,
	}
	if err := updateLists(ctx, rel, sourceList, sources, opts, out); err != nil {
		return nil, err
	}
	args := append(append([]string(nil), opts...), "install", "--download-only", "-y", "-q")
	if err := apt(ctx, "install", append(args, pkgs...), out); err != nil {
		return nil, err
	}
	debs, err := filepath.Glob(filepath.Join(work, "archives", "*.deb"))
	sort.Strings(debs)
	return debs, err
}

// updateLists fetches the release's package lists when they are older
// than listsMaxAge or come from other sources, one build at a time.
func updateLists(ctx context.Context, rel, sourceList, sources string, opts []string, out func(string)) error {
	lock, err := os.OpenFile(filepath.Join(rel, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	stamp := filepath.Join(rel, "updated")
	old, _ := os.ReadFile(sourceList)
	if fi, err := os.Stat(stamp); err == nil && string(old) == sources && time.Since(fi.ModTime()) < listsMaxAge {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(sourceList, []byte(sources), 0o644); err != nil {
		return err
	}
	out("fetching the package lists")
	if err := apt(ctx, "update", append(append([]string(nil), opts...), "update", "-q"), out); err != nil {
		return err
	}
	return os.WriteFile(stamp, nil, 0o644)
}

// apt runs the host's apt-get for verb, its output to out; an error
// carries its last lines.
func apt(ctx context.Context, verb string, args []string, out func(string)) error {
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	w := &lines{emit: out}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	w.flush()
	if err != nil {
		return fmt.Errorf("apt-get %s: %v%s", verb, err, suffix(", after:\n", strings.TrimSpace(w.tail())))
	}
	return nil
}
