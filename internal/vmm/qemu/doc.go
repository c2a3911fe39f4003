// Package qemu runs warren's microVMs under QEMU (qemu-system-x86_64,
// version 7.2 or later) and drives them through QMP, its JSON control
// protocol, with a client of its own (Client). VMM and Machine satisfy
// package vmm's contract.
//
// # How a machine starts
//
//  1. The node opens everything QEMU needs to write, as root, and keeps
//     the paths to itself: it binds the QMP and agent sockets (listening),
//     opens the root disk and the workspace disk, if any, read-write and
//     read-only (O_DIRECT when the filesystem allows it), the write end of
//     the console's FIFO (which it drains into the console log, bounded:
//     package consolelog) and QEMU's stderr log, and, for a restore, the
//     memory snapshot.
//  2. It creates the machine's cgroup (internal/cgroup) with CPU = vCPUs,
//     memory = guest memory + the VMM's overhead (swap capped with it) and
//     a pids limit, and takes a free uid of its range for the machine.
//  3. It starts QEMU in a jail (vmm/jail: own mount, pid, net, uts and ipc
//     namespaces, a read-only root of /usr plus the loader cache, a few
//     device nodes and the kernel and initrd, no_new_privs, that uid, no
//     core dumps) with those descriptors inherited and the command line of
//     commandLine: always -S, so the vCPUs are stopped, and -incoming defer
//     for a restore. QEMU installs its own seccomp filter (-sandbox on,
//     denying obsolete calls, privilege changes, process spawning and
//     resource control).
//  4. It moves QEMU into the cgroup. On cgroup v1 there is no way to start
//     a process inside a group, so QEMU's first milliseconds of set-up
//     (before any guest code, which -S holds back) are charged to the
//     caller's group; on v2, clone3's CLONE_INTO_CGROUP would avoid that
//     but internal/cgroup does not expose the group's directory yet.
//  5. It connects QMP, negotiates capabilities, and for a restore feeds the
//     snapshot (migrate-incoming fd:N) and waits for it to load; then it
//     runs the vCPUs (cont) unless asked to start paused.
//
// On any error the process is killed and the cgroup, sockets and uid are
// released. A QEMU that dies is only ever an error to the caller: its exit
// is seen by a goroutine that waits for the process, and by QMP's end of
// file; QMP input is bounded and parsed defensively (see Client). QEMU is
// signalled through a pidfd, never by pid.
//
// # Attaching after a restart
//
// QEMU does not depend on the process that started it (vmm/jail: its own
// session, no parent-death signal), and its QMP socket takes a new client
// once the old one is gone. So a later process (a restarted daemon)
// attaches to it (VMM.Attach) from what the first one recorded: the pid,
// its start time (which a process that reused the pid does not share) and
// the uid. The attached machine is driven like a started one, but it is not
// the caller's child: its end is seen when its pidfd turns readable, and
// its exit status cannot be read, so it counts as requested after Stop or
// Kill, as clean after a guest-initiated SHUTDOWN, and as a crash
// otherwise (vmm.Exit.StatusUnknown).
//
// # Memory snapshots
//
// SaveMemory stops the vCPUs and migrates the machine into a file: QEMU
// 7.2 has no file: migration URI (it came in 8.2), and exec: would need a
// shell, which the seccomp filter forbids (spawn=deny), so the node opens
// the file and passes its descriptor over QMP (getfd) and migrates to
// fd:NAME. A restore starts QEMU with -incoming defer, with the same
// Config, and feeds it the file's descriptor.
//
// Not done here: networking, vsock (no vhost_vsock on the hosts warren is
// built on; the agent's channel is a virtio-serial port), and a seccomp
// filter of warren's own around QEMU's.
package qemu
