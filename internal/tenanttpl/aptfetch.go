package tenanttpl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/agentconn"
	"warren/internal/archive"
	"warren/internal/hostclaim"
	"warren/internal/template"
)

// An apt step's packages are resolved and fetched by the host's apt-get,
// with the host's mirror and Debian archive keys, and installed by the
// sandbox's own apt (docs/TEMPLATES.md). What of the sandbox's reaches the
// host on that path, and what guards it:
//
//   - nothing the sandbox wrote names a host path, a URL or an apt
//     option: the suite is warren's record of the build sandbox's built-in
//     template (aptSuite), a name template.Suite vouches for;
//   - its dpkg status, copied into a file (at most maxAptStatus bytes),
//     is parsed by apt-get running as a uid of its own (above aptUIDBase,
//     claimed on the host, never root), in a 0700 directory that uid owns, in a
//     mount namespace that shows it the node's apt directory alone at
//     aptMount, under rlimits (prlimit) and a timeout, with no
//     capabilities and a minimal environment; its processes are killed
//     when it ends, and what a fetch of its uid left is swept before the
//     uid's next one;
//   - the package files apt fetched are read by the daemon only as
//     regular files of that uid, named and sized as apt's plan said,
//     through an os.Root of their directory;
//   - apt's output reaches the tenant filtered (aptLog): what it says of
//     the packages and its errors, never a mirror's address or a node's
//     path.
//
// The node's apt directory, templates/.apt in the disk pool (root's,
// 0711):
//
//	SUITE/          root's, 0755: sources.list, parts/ (empty), status
//	                (empty), lock, updated (when the lists were fetched)
//	SUITE/lists/    the lists' owner's (aptUIDBase), 0755: apt-get update's
//	SUITE/cache/    its too, and SUITE/tmp/ (0700)
//	run/XXXX/       one fetch's, 0700, its uid's: status, cache/,
//	                archives/, tmp/
//
// Root makes each directory, fills it and then gives it to its uid: root
// never writes in a directory an apt uid may change.

// Bounds of the host's apt for one apt step.
const (
	// listsMaxAge is how long fetched package lists serve builds before
	// they are fetched again.
	listsMaxAge = time.Hour
	// maxAptStatus bounds the sandbox's dpkg status the host's apt reads.
	maxAptStatus = 64 << 20
	// maxAptFetch bounds the package files one apt step fetches.
	maxAptFetch = 2 << 30
	// aptListsSpace is what fetching a suite's lists may take of the
	// node's disk.
	aptListsSpace = 512 << 20
	// aptTimeout bounds each run of apt-get.
	aptTimeout = 20 * time.Minute
	// maxAptLines bounds the lines of apt's a step shows the tenant, and
	// aptTailLines those a failure ends with.
	maxAptLines  = 1000
	aptTailLines = 20
)

// The host uids apt-get runs as: aptUIDBase owns the package lists and
// fetches them; each fetch (which parses a sandbox's dpkg status) runs as
// one of the aptUIDs above it, claimed on the host (fetchUID) and used by
// nothing else, so that a fetch can neither change the lists other builds trust nor
// touch another fetch's files. They are used as gids too.
const (
	aptUIDBase = 2_900_000_000
	aptUIDs    = 1 << 20
)

// aptSuite is the Debian suite an apt step in a sandbox of built-in
// template tpl resolves against: the template's recipe's. A sandbox of a
// tenant's template has the built-in template its lineage started from;
// one of an imported image has none warren knows.
func aptSuite(tpl string) (string, error) {
	suite, ok := template.Suite(tpl)
	if !ok {
		return "", fmt.Errorf("the build's base (%s) has no Debian suite warren knows: apt steps need a base made from one (a built-in template, debian:SUITE, or a template built from them); install with a run step and the network instead", tpl)
	}
	return suite, nil
}

// aptFetch is one apt step's resolution and download on the host.
type aptFetch struct {
	dir   string   // the node's apt directory, templates/.apt
	suite string   // from aptSuite
	pkgs  []string // the step's, as buildspec validated them
	// hold holds n bytes of the node's free disk for what, until release.
	hold func(n int64, what string) (release func(), err error)
	log  *aptLog
}

// aptDeb is a package file a fetch's plan names.
type aptDeb struct {
	name         string // NAME_VERSION_ARCH.deb
	size         int64
	pkg, version string
}

// run resolves the packages against the sandbox's dpkg status (opened
// with status once the lists are fetched, read to its end or
// maxAptStatus), downloads the package files that
// installing them takes, and gives each to each, in the plan's order, as
// a reader of its bytes. Everything it wrote on the node is gone when it
// returns.
func (f *aptFetch) run(ctx context.Context, status func() (io.ReadCloser, error), each func(d aptDeb, r io.Reader) error) error {
	if len(f.pkgs) == 0 {
		return nil
	}
	if err := ensureDir(f.dir, 0o711, 0); err != nil {
		return err
	}
	unlock, err := f.updateLists(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	release, err := f.hold(maxAptStatus, "apt steps are")
	if err != nil {
		return err
	}
	defer func() { release() }()
	uid, done, err := fetchUID()
	if err != nil {
		return err
	}
	defer done()
	if err := ensureDir(filepath.Join(f.dir, "run"), 0o711, 0); err != nil {
		return err
	}
	killUID(uid)
	if err := sweepRuns(filepath.Join(f.dir, "run"), uid); err != nil {
		return err
	}
	// Made root's, filled, then given to uid, its contents first: apt
	// never shares a directory with root's writes.
	work, err := os.MkdirTemp(filepath.Join(f.dir, "run"), "")
	if err != nil {
		return err
	}
	defer func() {
		killUID(uid)
		os.RemoveAll(work)
	}()
	if err := writeStatus(filepath.Join(work, "status"), status); err != nil {
		return err
	}
	for _, d := range []string{"cache", "archives", "archives/partial", "tmp"} {
		if err := os.Mkdir(filepath.Join(work, d), 0o700); err != nil {
			return err
		}
	}
	for _, d := range []string{"archives/partial", "archives", "cache", "tmp", "status", "."} {
		if err := os.Lchown(filepath.Join(work, d), uid, uid); err != nil {
			return err
		}
	}
	run := "run/" + filepath.Base(work)
	suite, here := aptMount+"/"+f.suite+"/", aptMount+"/"+run+"/"
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + suite + "sources.list", "-o", "Dir::Etc::SourceParts=" + suite + "parts/",
		"-o", "Dir::Etc::Preferences=/dev/null", "-o", "Dir::Etc::PreferencesParts=" + suite + "parts/",
		"-o", "Dir::State::Lists=" + suite + "lists/", "-o", "Dir::State::status=" + here + "status",
		"-o", "Dir::State::extended_states=" + here + "extended_states",
		"-o", "Dir::Cache=" + here + "cache/", "-o", "Dir::Cache::archives=" + here + "archives/",
		"-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=",
		"-o", "Debug::NoLocking=true", "-o", "APT::Install-Recommends=false", "-o", "Acquire::Languages=none",
		"-o", "APT::Get::List-Cleanup=false",
		"install", "--download-only", "-y", "-q",
	}
	// The plan first: what would be fetched, and how much.
	var plan []aptDeb
	keep := f.log.keep
	f.log.keep = func(s string) bool {
		d, ok := parsePrintURI(s)
		if ok {
			plan = append(plan, d)
		}
		return !ok
	}
	if err := aptGet(ctx, f.dir, run, uid, "install", append(append(opts[:len(opts):len(opts)], "--print-uris", "-qq"), f.pkgs...), f.log); err != nil {
		return err
	}
	f.log.keep = keep
	var total int64
	for _, d := range plan {
		total += d.size
	}
	if total > maxAptFetch {
		return fmt.Errorf("the packages take %d MiB, more than the %s an apt step may fetch: split the step", total>>20, archive.Size(maxAptFetch))
	}
	if len(plan) > 0 {
		f.log.emit(fmt.Sprintf("fetching %d package files, %s", len(plan), sizeText(total)))
		for _, d := range plan {
			f.log.emit(fmt.Sprintf("  %s %s (%s)", d.pkg, d.version, sizeText(d.size)))
		}
	}
	// The status file is read: its space goes to the package files.
	release()
	release = func() {}
	r, err := f.hold(total, "apt steps are")
	if err != nil {
		return err
	}
	release = r
	if len(plan) > 0 {
		if err := aptGet(ctx, f.dir, run, uid, "install", append(opts, f.pkgs...), f.log); err != nil {
			return err
		}
	}
	killUID(uid)
	archives, err := os.OpenRoot(filepath.Join(work, "archives"))
	if err != nil {
		return err
	}
	defer archives.Close()
	for _, d := range plan {
		if err := eachDeb(archives, uid, d, each); err != nil {
			return err
		}
	}
	return nil
}

// eachDeb gives d's file to each once it is what the plan said: a
// regular file of the fetch's uid, with one link, of d's size.
func eachDeb(archives *os.Root, uid int, d aptDeb, each func(aptDeb, io.Reader) error) error {
	fh, err := archives.OpenFile(d.name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("%s was not fetched: %w", d.name, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || st.Uid != uint32(uid) || st.Nlink != 1 || fi.Size() != d.size {
		return fmt.Errorf("%s is not the file apt said it would fetch", d.name)
	}
	return each(d, io.LimitReader(fh, d.size))
}

// updateLists fetches the suite's package lists (as aptUIDBase) when they
// are older than listsMaxAge or come from other sources, one update at a
// time, and returns holding a shared lock on them that keeps the next
// update out until unlock.
func (f *aptFetch) updateLists(ctx context.Context) (unlock func(), err error) {
	rel := filepath.Join(f.dir, f.suite)
	if err := ensureDir(rel, 0o755, 0); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(rel, "lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	sources := aptSources(f.suite)
	stamp := filepath.Join(rel, "updated")
	fresh := func() bool {
		old, _ := os.ReadFile(filepath.Join(rel, "sources.list"))
		fi, err := os.Stat(stamp)
		return err == nil && string(old) == sources && time.Since(fi.ModTime()) < listsMaxAge && ownedBy(filepath.Join(rel, "lists"), aptUIDBase)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		return nil, err
	}
	unlock = func() { lock.Close() }
	if fresh() {
		return unlock, nil
	}
	// Fetches reading the lists end first; another update may come first.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, err
	}
	if !fresh() {
		if err := f.fetchLists(ctx, rel, sources, stamp); err != nil {
			return nil, err
		}
	}
	return unlock, unix.Flock(int(lock.Fd()), unix.LOCK_SH)
}

// fetchLists runs apt-get update for the suite in rel, under its lock.
func (f *aptFetch) fetchLists(ctx context.Context, rel, sources, stamp string) error {
	release, err := f.hold(aptListsSpace, "apt steps are")
	if err != nil {
		return err
	}
	defer release()
	if err := os.Remove(stamp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	lists := filepath.Join(rel, "lists")
	if !ownedBy(lists, aptUIDBase) {
		// Made root's with its partial/, then given to aptUIDBase: root
		// never writes in a directory of apt's.
		if err := os.RemoveAll(lists); err != nil {
			return err
		}
		if err := os.Mkdir(lists, 0o755); err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(lists, "partial"), 0o700); err != nil {
			return err
		}
		for _, d := range []string{filepath.Join(lists, "partial"), lists} {
			if err := os.Lchown(d, aptUIDBase, aptUIDBase); err != nil {
				return err
			}
		}
	}
	if err := ensureDir(filepath.Join(rel, "parts"), 0o755, 0); err != nil {
		return err
	}
	if err := ensureDir(filepath.Join(rel, "cache"), 0o755, aptUIDBase); err != nil {
		return err
	}
	if err := ensureDir(filepath.Join(rel, "tmp"), 0o700, aptUIDBase); err != nil {
		return err
	}
	for name, b := range map[string]string{"sources.list": sources, "status": ""} {
		if err := os.WriteFile(filepath.Join(rel, name), []byte(b), 0o644); err != nil {
			return err
		}
	}
	f.log.emit("fetching the package lists of " + f.suite)
	here := aptMount + "/" + f.suite + "/"
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + here + "sources.list", "-o", "Dir::Etc::SourceParts=" + here + "parts/",
		"-o", "Dir::State::Lists=" + here + "lists/", "-o", "Dir::State::status=" + here + "status",
		"-o", "Dir::Cache=" + here + "cache/", "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache=",
		"-o", "Debug::NoLocking=true", "-o", "Acquire::Languages=none", "-o", "APT::Get::List-Cleanup=false",
		"update", "-q",
	}
	if err := aptGet(ctx, f.dir, f.suite, aptUIDBase, "update", opts, f.log); err != nil {
		return err
	}
	return os.WriteFile(stamp, nil, 0o644)
}

// aptSources is the sources.list of suite: the host's mirrors of it, its
// updates and its security updates.
func aptSources(suite string) string {
	mirror := template.AptMirror(suite)
	line := "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n"
	s := fmt.Sprintf(line, mirror, suite) + fmt.Sprintf(line, mirror, suite+"-updates")
	if sec := template.AptMirror(suite + "-security"); sec != mirror {
		s += fmt.Sprintf(line, sec, suite+"-security")
	}
	return s
}

// aptMirrors are the addresses apt's output must not show a tenant: the
// hosts of the suite's mirrors.
func aptMirrors(suite string) []string {
	var hosts []string
	for _, s := range []string{suite, suite + "-security"} {
		if u, err := url.Parse(template.AptMirror(s)); err == nil && u.Host != "" {
			hosts = append(hosts, u.Host, u.Hostname())
		}
	}
	return hosts
}

// aptMount is where apt-get sees the node's apt directory: a bind mount
// in a mount namespace of its own, so that every directory on its paths
// is one it may search (the pool's ancestors are root's alone) and its
// temporary files are its own. Nothing of the host's /tmp is in its view.
const aptMount = "/tmp"

// aptGet runs the host's apt-get with args as uid, in dir (a directory of
// aptDir, the node's apt directory; the paths in args are under aptMount),
// within aptTimeout and rlimits, without capabilities, its output to log.
// An error carries the last lines log kept.
func aptGet(ctx context.Context, aptDir, dir string, uid int, verb string, args []string, log *aptLog) error {
	ctx, cancel := context.WithTimeout(ctx, aptTimeout)
	defer cancel()
	id, cwd := strconv.Itoa(uid), aptMount+"/"+dir
	argv := []string{
		"--as=" + strconv.Itoa(4<<30), "--fsize=" + strconv.Itoa(maxAptFetch), "--nofile=1024", "--nproc=64",
		"--cpu=" + strconv.Itoa(int(aptTimeout/time.Second)), "--core=0",
		"unshare", "--mount", "--propagation", "private",
		"sh", "-c", `mount --bind "$1" "$2" && cd "$3" && shift 3 && exec "$@"`, "warren-apt", aptDir, aptMount, cwd,
		"setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
		"--", "apt-get",
	}
	cmd := exec.CommandContext(ctx, "prlimit", append(argv, args...)...)
	w := &agentconn.Lines{Emit: log.line}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/nonexistent", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive", "TMPDIR=" + cwd + "/tmp"}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	w.Flush()
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("apt-get %s took longer than %v", verb, aptTimeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = errors.New(ee.ProcessState.String())
	}
	if tail := log.tail(); tail != "" {
		return fmt.Errorf("apt-get %s: %v, after:\n%s", verb, err, tail)
	}
	return fmt.Errorf("apt-get %s: %v", verb, err)
}

// fetchUID claims a fetch's uid, one no other fetch on the host uses, of
// this warren server or another's (a host-wide claim, hostclaim), and
// returns its release.
func fetchUID() (int, func(), error) {
	claims, err := hostclaim.Open("apt-uids")
	if err != nil {
		return 0, nil, err
	}
	n, f, err := claims.Take(aptUIDs, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("apt: a uid for the fetch: %w", err)
	}
	return aptUIDBase + 1 + n, func() { f.Close() }, nil
}

// sweepRuns removes what a fetch of uid left in run (its directory, when a
// daemon died during it), before uid's next fetch: one fetch never meets
// another's files, a tenant's dpkg status among them. (The caller kills
// what it left running first: killUID.)
func sweepRuns(run string, uid int) error {
	entries, err := os.ReadDir(run)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if ownedBy(filepath.Join(run, e.Name()), uid) {
			if err := os.RemoveAll(filepath.Join(run, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// killUID kills every process of uid, a fetch's: what its apt-get left.
func killUID(uid int) {
	id := strconv.Itoa(uid)
	// kill(-1) as uid reaches exactly uid's processes; none left is an
	// error of kill's, and nothing to do.
	exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", "kill", "-KILL", "-1").Run()
}

// ensureDir makes dir with perm, owned by uid, or fixes an existing one;
// what is in its place and is not a directory of uid (an older layout's)
// goes first. dir's parent is root's: nobody else can change the entry
// between the checks and the changes.
func ensureDir(dir string, perm os.FileMode, uid int) error {
	if !ownedBy(dir, uid) {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.Mkdir(dir, perm); err != nil {
			return err
		}
		if err := os.Lchown(dir, uid, uid); err != nil {
			return err
		}
	}
	return os.Chmod(dir, perm)
}

// ownedBy reports whether path is a directory of uid.
func ownedBy(path string, uid int) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir() && fi.Sys().(*syscall.Stat_t).Uid == uint32(uid)
}

// writeStatus copies a sandbox's dpkg status into the file name, at most
// maxAptStatus bytes.
func writeStatus(name string, open func() (io.ReadCloser, error)) error {
	status, err := open()
	if err != nil {
		return err
	}
	defer status.Close()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(status, maxAptStatus+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > maxAptStatus {
		err = fmt.Errorf("/var/lib/dpkg/status is larger than %s", archive.Size(maxAptStatus))
	}
	return err
}

// printURI is a line of apt-get --print-uris: 'URI' FILE SIZE CHECKSUM.
// apt checks the checksum as it fetches; the URI is the mirror's, never
// shown.
var printURI = regexp.MustCompile(`^'[^']+' ([A-Za-z0-9][A-Za-z0-9+.~%-]*_[A-Za-z0-9+.~%-]+_[a-z0-9-]+\.deb) ([0-9]{1,15}) \S+$`)

// parsePrintURI parses a line of apt-get --print-uris.
func parsePrintURI(s string) (aptDeb, bool) {
	m := printURI.FindStringSubmatch(s)
	if m == nil {
		return aptDeb{}, false
	}
	size, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return aptDeb{}, false
	}
	parts := strings.Split(strings.TrimSuffix(m[1], ".deb"), "_")
	version, err := url.PathUnescape(parts[1])
	if err != nil {
		version = parts[1]
	}
	return aptDeb{name: m[1], size: size, pkg: parts[0], version: version}, true
}

// aptLog filters the host's apt output for the tenant: lines about its
// packages (fetched, not found, their dependencies) and apt's errors and
// warnings, with every address and node path taken out; apt's progress,
// its sources and its mirrors are not the tenant's.
type aptLog struct {
	out func(string) // the build's progress; nil for none
	// scrub are the mirrors' host names and host:ports.
	scrub []string
	// keep, when set, sees each line first and says whether to go on
	// with it.
	keep  func(string) bool
	last  []string // the last aptTailLines lines given out
	shown int      // lines given out
	// raw are the last aptTailLines lines as apt wrote them, for the node's
	// log, never the tenant's.
	raw  []string
	deps bool // within apt's list of unmet dependencies
}

var aptFetched = regexp.MustCompile(`^(Get|Err):\d+ \S+ \S+ \S+ (\S+) (\S+) (\S+)(?: \[([^\]]+)\])?`)

// line takes one line of apt's output.
func (l *aptLog) line(s string) {
	if l.keep != nil && !l.keep(s) {
		return
	}
	if l.raw = append(l.raw, s); len(l.raw) > aptTailLines {
		l.raw = l.raw[1:]
	}
	if m := aptFetched.FindStringSubmatch(s); m != nil {
		if m[1] == "Get" {
			l.emit(fmt.Sprintf("fetched %s %s (%s)", m[2], m[4], m[5]))
		} else {
			l.emit(fmt.Sprintf("could not fetch %s %s", m[2], m[4]))
		}
		return
	}
	switch {
	case strings.HasPrefix(s, "The following packages have unmet dependencies"):
		l.deps = true
	case l.deps && strings.HasPrefix(s, " "):
	case strings.HasPrefix(s, "E: "), strings.HasPrefix(s, "W: "), strings.HasPrefix(s, "  ") && len(l.last) > 0 && strings.HasPrefix(l.last[len(l.last)-1], "could not fetch"):
		l.deps = false
	default:
		l.deps = false
		return
	}
	l.emit(l.clean(s))
}

// aptIP is how apt names the address it fetched from.
var aptIP = regexp.MustCompile(`\[IP: [^\]]*\]`)

// clean takes addresses, URLs and paths out of s.
func (l *aptLog) clean(s string) string {
	f := strings.Fields(aptIP.ReplaceAllString(s, ""))
	for i, w := range f {
		bare := strings.Trim(w, `()[]'",;:.`)
		switch {
		case strings.Contains(w, "://"):
			f[i] = "(the mirror)"
		case strings.Contains(bare, "/"):
			f[i] = "(a file)"
		case bare == "IP" || isAddr(bare):
			f[i] = ""
		}
		for _, h := range l.scrub {
			if bare == h {
				f[i] = "(the mirror)"
			}
		}
	}
	out := strings.Join(strings.Fields(strings.Join(f, " ")), " ")
	if strings.HasPrefix(s, " ") {
		out = "  " + out
	}
	return out
}

// isAddr reports whether s is an IP address, with a port or not.
func isAddr(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	_, err := netip.ParseAddrPort(s)
	return err == nil
}

// emit gives s out (the first maxAptLines) and keeps it for the tail.
func (l *aptLog) emit(s string) {
	if l.shown++; l.out != nil && l.shown <= maxAptLines {
		l.out(s)
	} else if l.out != nil && l.shown == maxAptLines+1 {
		l.out(fmt.Sprintf("(apt's lines after the first %d are not shown)", maxAptLines))
	}
	if l.last = append(l.last, s); len(l.last) > aptTailLines {
		l.last = l.last[1:]
	}
}

func (l *aptLog) tail() string { return strings.Join(l.last, "\n") }

// sizeText is n bytes for a person: 56 KiB, 12.3 MiB.
func sizeText(n int64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
