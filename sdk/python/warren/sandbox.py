"""Sandboxes, their commands and background processes."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import secrets
import signal as _signal
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ._body import Data, request_body
from ._pages import MAX_LIST_LIMIT, Page, States, fetch_page, iterate
from ._transport import IDEMPOTENT, NEVER, REFUSED, RawStream, Transport, path_of
from .client import Client, default_client
from .errors import (
    BadRequestError,
    CommandTimeout,
    NotFoundError,
    RequestTimeout,
    SandboxGoneError,
    StreamBrokenError,
    WarrenError,
    _sandbox_gone,
)
from .files import Files
from .models import (
    ExecEvent,
    ExecResult,
    NetworkPolicy,
    NetworkStatus,
    Preview,
    ProcessInfo,
    SandboxInfo,
    SandboxMetrics,
    _policy_of,
)
from .snapshots import Snapshot, _client_of, _snapshot_id

__all__ = ["Sandbox", "Process", "ExecStream", "Command", "OutputCallback", "NetworkArg"]

#: A command: a list of arguments run directly (argv), or a string run as a
#: shell command line by ``/bin/sh -c``.
Command = Union[Sequence[str], str]

#: A callback that receives output bytes exactly as the command wrote them.
OutputCallback = Callable[[bytes], None]

#: An egress policy as an argument: a :class:`~warren.NetworkPolicy`, or a
#: dict with its fields (``{"allow": ["pypi.org"]}``).
NetworkArg = Union[NetworkPolicy, Mapping[str, Any]]

# Extra seconds a command's socket waits beyond the command's own timeout:
# the agent may take a while to start it, and the answer must still arrive.
_TIMEOUT_MARGIN = 60.0

# How much of each output stream a streamed exec keeps for its result, as the
# server does for a collected one.
_MAX_OUTPUT = 16 << 20

# How long the server waits for a snapshot to become durable when asked to
# wait without a timeout of its own.
_SNAPSHOT_WAIT = 600.0

# The least socket timeout of a restore: it answers once every sandbox runs,
# which takes longer the more it starts.
_RESTORE_TIMEOUT = 600.0


def _millis(seconds: Optional[float], what: str) -> Optional[int]:
    """Seconds as whole milliseconds, rounded up (at least 1); None stays
    None."""
    if seconds is None:
        return None
    if seconds <= 0:
        raise ValueError(f"{what} must be positive, not {seconds}")
    return max(1, math.ceil(seconds * 1000))


def _seconds(seconds: Optional[float], what: str) -> Optional[int]:
    """Seconds as whole seconds, rounded up (at least 1); None stays None."""
    if seconds is None:
        return None
    if seconds <= 0:
        raise ValueError(f"{what} must be positive, not {seconds}")
    return max(1, math.ceil(seconds))


def _exec_body(
    cmd: Command,
    *,
    stdin: Union[bytes, str, None],
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    timeout: Optional[float],
    tag: Optional[str],
    pty: Optional[Tuple[int, int]] = None,
) -> Dict[str, Any]:
    """The ExecRequest of a command; pty is a terminal's (cols, rows)."""
    body: Dict[str, Any] = {}
    if isinstance(cmd, str):
        if not cmd:
            raise ValueError("empty shell command")
        body["shell"] = cmd
    else:
        argv = [str(a) for a in cmd]
        if not argv or not argv[0]:
            raise ValueError("empty command: want a program name first")
        body["cmd"] = argv
    if stdin is not None:
        raw = stdin.encode("utf-8") if isinstance(stdin, str) else bytes(stdin)
        body["stdin"] = base64.b64encode(raw).decode("ascii")
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd:
        body["cwd"] = cwd
    if user:
        body["user"] = user
    ms = _millis(timeout, "timeout")
    if ms is not None:
        body["timeout_ms"] = ms
    if tag:
        body["tag"] = tag
    if pty is not None:
        body["pty"] = _pty_size(pty)
    return body


def _pty_size(size: Tuple[int, int]) -> Dict[str, int]:
    """A terminal's (cols, rows) as PTYSize, each 1 to 1000."""
    cols, rows = (int(v) for v in size)
    if not (1 <= cols <= 1000 and 1 <= rows <= 1000):
        raise ValueError(f"pty size {cols}x{rows}: cols and rows must be 1 to 1000")
    return {"cols": cols, "rows": rows}


def _sandbox_body(
    *,
    runtime: Optional[str],
    cpus: Optional[float],
    memory_mb: Optional[int],
    pids: Optional[int],
    timeout: Optional[float],
    env: Optional[Mapping[str, str]],
    metadata: Optional[Mapping[str, str]],
    workspace_mb: Optional[int] = None,
    network: Optional[NetworkArg] = None,
    region: Optional[str] = None,
    node_labels: Optional[Mapping[str, str]] = None,
    checkpoint_every: Optional[float] = None,
    persistence: Optional[str] = None,
    on_timeout: Optional[str] = None,
    idle_timeout: Optional[float] = None,
    paused_ttl: Optional[float] = None,
    auto_resume: Optional[bool] = None,
) -> Dict[str, Any]:
    """The fields that CreateSandboxRequest and RestoreRequest share, for
    the arguments that are not None."""
    body: Dict[str, Any] = {}
    for key, value in (("runtime", runtime), ("cpus", cpus), ("memory_mb", memory_mb), ("pids", pids),
                       ("workspace_mb", workspace_mb), ("persistence", persistence),
                       ("on_timeout", on_timeout), ("auto_resume", auto_resume)):
        if value is not None:
            body[key] = value
    for key, what, seconds in (("timeout_seconds", "timeout", timeout),
                               ("checkpoint_every_seconds", "checkpoint_every", checkpoint_every),
                               ("idle_timeout_seconds", "idle_timeout", idle_timeout),
                               ("paused_ttl_seconds", "paused_ttl", paused_ttl)):
        whole = _seconds(seconds, what)
        if whole is not None:
            body[key] = whole
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if metadata:
        body["metadata"] = {str(k): str(v) for k, v in metadata.items()}
    if network is not None:
        body["network"] = _policy_of(network).to_json()
    if region:
        body["region"] = region
    if node_labels:
        body["node_labels"] = {str(k): str(v) for k, v in node_labels.items()}
    return body


def _once(key: Optional[str]) -> str:
    """The idempotency key of a call with effects: the caller's, or a new
    one, which makes the call's own retries safe."""
    return key or secrets.token_hex(16)


def _stream_error(message: str) -> WarrenError:
    """The exception of an error event in a stream."""
    if _sandbox_gone(message):
        return SandboxGoneError(message, code="conflict")
    return StreamBrokenError(message)


class ExecStream:
    """The events of a command as they happen: iterate over it for
    :class:`~warren.ExecEvent` objects (``start``, then ``stdout`` and
    ``stderr`` with exact bytes, then ``end``).

    Use it as a context manager, or read it to its end, so that its
    connection is released. Closing a streamed exec before its end kills the
    command; closing a process's stream leaves the process running. Not safe
    for concurrent use by several threads.

    Raises (while iterating):
        SandboxGoneError: the sandbox stopped under the command.
        StreamBrokenError: the stream ended before the end event.
    """

    def __init__(self, raw: RawStream, what: str) -> None:
        self._raw = raw
        self._what = what
        self._done = False
        #: The command's pid, once the start event was read.
        self.pid: int = 0
        #: The outcome (without output), once the end event was read.
        self.result: Optional[ExecResult] = None

    def __iter__(self) -> "ExecStream":
        return self

    def __next__(self) -> ExecEvent:
        if self._done:
            raise StopIteration
        while True:
            try:
                line = self._raw.readline()
            except WarrenError:
                self._fail()
                raise
            if not line:
                self._fail()
                raise StreamBrokenError(f"{self._what}: the stream ended before the command's end")
            if line.strip():
                break
        try:
            ev = ExecEvent.from_json(json.loads(line.decode("utf-8")))
        except (ValueError, TypeError) as e:
            self._fail()
            raise StreamBrokenError(f"{self._what}: bad event {line[:200]!r}: {e}") from e
        if ev.type == "error":
            self._fail()
            raise _stream_error(ev.error or "the stream broke")
        if ev.pid:
            self.pid = ev.pid
        if ev.type == "end":
            self._done = True
            self.result = ExecResult(
                stdout="", stderr="", exit_code=ev.exit_code if ev.exit_code is not None else -1,
                duration=ev.duration, timed_out=ev.timed_out, pid=self.pid, status=ev.status,
            )
            try:
                self._raw.read()  # the answer ends right after: keep its connection
            except WarrenError:
                pass
            self._raw.close()
        return ev

    def _fail(self) -> None:
        self._done = True
        self._raw.close()

    def close(self) -> None:
        """Stop reading; idempotent."""
        self._done = True
        self._raw.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Output:
    """Output kept for a result, up to a limit."""

    def __init__(self) -> None:
        self.parts: List[bytes] = []
        self.size = 0
        self.truncated = False

    def add(self, data: bytes) -> None:
        room = _MAX_OUTPUT - self.size
        if len(data) > room:
            data = data[: max(room, 0)]
            self.truncated = True
        if data:
            self.parts.append(data)
            self.size += len(data)

    def text(self) -> str:
        return b"".join(self.parts).decode("utf-8", "replace")


class Process:
    """A command started in the background with :meth:`Sandbox.start`.

    Its output is kept by the sandbox's agent: :meth:`stream` with replay
    returns all of it, even what was written before the call.
    """

    def __init__(self, sandbox: "Sandbox", pid: int, tag: str = "") -> None:
        #: The sandbox the process runs in.
        self.sandbox: Sandbox = sandbox
        #: Its process id in the sandbox.
        self.pid: int = pid
        #: The tag it was started with, if any.
        self.tag: str = tag

    def __repr__(self) -> str:
        return f"<Process {self.pid} in {self.sandbox.id}>"

    def _path(self, *elems: str) -> str:
        return self.sandbox._path("processes", str(self.pid), *elems)

    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Wait for the process to end and return its exit code, status and
        duration (stdout and stderr are empty: read them with
        :meth:`stream`).

        Args:
            timeout: seconds to wait at most; None waits as long as it runs.

        Raises:
            CommandTimeout: it has not ended within timeout (it goes on).
        """
        ms = _millis(timeout, "timeout")
        sock_timeout = None if timeout is None else timeout + _TIMEOUT_MARGIN
        try:
            answer = self.sandbox._transport.request(
                "POST", self._path("wait"), query={"timeout_ms": ms}, retry=REFUSED, timeout=sock_timeout
            )
        except RequestTimeout as e:
            if e.status == 504:
                raise CommandTimeout(
                    f"process {self.pid} has not ended after {timeout}s", code=e.code,
                    status=e.status, request_id=e.request_id,
                ) from None
            raise
        return ExecResult.from_json(answer.json())

    def send_stdin(self, data: Data, close: bool = False) -> None:
        """Write to the process's stdin, streamed in order (a file object
        is read in chunks, never whole); with close, then close its stdin
        (EOF). Never retried."""
        self.sandbox._transport.request(
            "POST", self._path("stdin"), query={"close": True if close else None},
            body=request_body(data), retry=NEVER,
        )

    def close_stdin(self) -> None:
        """Close the process's stdin (it reads EOF)."""
        self.send_stdin(b"", close=True)

    def resize(self, cols: int, rows: int) -> None:
        """Set the size of the terminal of a process started with ``pty``
        (it gets SIGWINCH). A process without one raises ConflictError."""
        self.sandbox._transport.request(
            "POST", self._path("resize"), json_body=_pty_size((cols, rows)), retry=REFUSED
        )

    def signal(self, sig: Union[str, int, _signal.Signals]) -> None:
        """Send a signal: a name (``"TERM"``, ``"SIGINT"``, any case) or a
        number. The server accepts TERM, KILL, INT, HUP, QUIT, USR1, USR2,
        STOP and CONT."""
        if isinstance(sig, int):
            name = _signal.Signals(sig).name
        else:
            name = str(sig)
        self.sandbox._transport.request(
            "POST", self._path("signal"), json_body={"signal": name}, retry=REFUSED
        )

    def kill(self) -> None:
        """Send SIGKILL."""
        self.signal("KILL")

    def stream(self, replay: bool = True) -> ExecStream:
        """The process's events until it ends: with replay, first the output
        it has written so far, so that nothing is missed. Closing the stream
        early leaves the process running."""
        raw = self.sandbox._transport.stream(
            "GET", self._path("stream"), query={"replay": True if replay else None}, retry=IDEMPOTENT
        )
        return ExecStream(raw, f"process {self.pid}")

    def output(self, timeout: Optional[float] = None) -> ExecResult:
        """Wait for the process to end and return its result with all of
        its output (replayed from its start).

        Raises:
            CommandTimeout: it has not ended within timeout seconds.
        """
        if timeout is not None:
            self.wait(timeout)
        out, err = _Output(), _Output()
        with self.stream(replay=True) as events:
            for ev in events:
                if ev.type == "stdout":
                    out.add(ev.data)
                elif ev.type == "stderr":
                    err.add(ev.data)
            end = events.result
        assert end is not None
        return dataclasses.replace(
            end, stdout=out.text(), stderr=err.text(), truncated=out.truncated or err.truncated
        )

    def info(self) -> ProcessInfo:
        """The process as the sandbox's process list shows it.

        Raises:
            NotFoundError: the agent no longer lists it.
        """
        for p in self.sandbox.processes():
            if p.pid == self.pid:
                return p
        raise NotFoundError(f"process {self.pid} not found in sandbox {self.sandbox.id}")


class Sandbox:
    """A running Linux computer in warren. Make one with :meth:`create`
    (or find one with :meth:`get` / :meth:`list`); use it as a context
    manager to delete it at the end of the block.

    A Sandbox is safe to share between threads: each call is one API
    request. Its :attr:`info` is a snapshot as of the last call that
    returned it (create, get, refresh, set_timeout; set_network updates its
    ``network``).

    Example::

        with Sandbox.create(memory_mb=512) as sb:
            print(sb.exec(["python3", "-c", "print(3 + 3)"]).stdout)
    """

    def __init__(self, info: SandboxInfo, client: Client) -> None:
        self._info = info
        #: The client the sandbox's calls go through.
        self.client: Client = client
        self._transport: Transport = client.transport
        #: The sandbox's filesystem.
        self.files: Files = Files(self)

    # -- finding and making sandboxes ---------------------------------------

    @classmethod
    def create(
        cls,
        template: Optional[str] = None,
        *,
        runtime: Optional[str] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        disk_mb: Optional[int] = None,
        workspace_mb: Optional[int] = None,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional[NetworkArg] = None,
        region: Optional[str] = None,
        node_labels: Optional[Mapping[str, str]] = None,
        checkpoint_every: Optional[float] = None,
        persistence: Optional[str] = None,
        on_timeout: Optional[str] = None,
        idle_timeout: Optional[float] = None,
        paused_ttl: Optional[float] = None,
        auto_resume: Optional[bool] = None,
        idempotency_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> "Sandbox":
        """Create a sandbox and return it once it is running. Arguments left
        None take the server's defaults.

        Args:
            template: the template to start from (default ``"default"``).
            runtime: ``"container"``, or ``"auto"`` for the strongest
                available (default).
            cpus: CPU limit, in cores (e.g. 0.5).
            memory_mb: memory limit in MiB.
            pids: limit on the number of processes.
            disk_mb: root disk size in MiB.
            workspace_mb: add an empty workspace disk of this many MiB
                (64 or more), mounted at /workspace, which can be
                snapshotted on its own (``snapshot(scope="workspace")``).
            timeout: time to live in seconds; the sandbox is deleted after
                it unless :meth:`set_timeout` extends it.
            env: environment variables of every command run in it.
            metadata: your own labels, kept with the sandbox.
            network: its egress policy, a :class:`~warren.NetworkPolicy` or
                a dict of its fields (``{"allow": ["pypi.org"]}``); None
                for the default (the internet, not private ranges). Change
                it later with :meth:`set_network`.
            region, node_labels: in a fleet, start on a node of that region
                with all these labels (a single machine refuses either).
            checkpoint_every: checkpoint the root disk every this many
                seconds (5 or more): in a fleet, when its node is lost or
                drained, the sandbox starts again on another node from its
                last checkpoint under the same id (``info.restored`` says
                from which, and how much work was lost). Not with a
                workspace disk.
            persistence: ``"always"`` for an always-on root disk: every
                block goes back, continuously, through the node's block
                server to its tiers, so an fsync in the sandbox returns once
                its data is durable beyond the node (docs/ALWAYS-ON.md).
                Default ``"snapshot"``: what :meth:`snapshot` saves.
            on_timeout: what its timeout (and its idle timeout) does:
                ``"delete"`` it (the default) or ``"pause"`` it, durably, as
                :meth:`pause` does.
            idle_timeout: once no exec, file call, terminal, process call or
                request to one of its ports has used it for this many
                seconds, ``on_timeout`` happens. Default: never.
            paused_ttl: how many seconds it stays paused before it is
                deleted (default: the server's, a week).
            auto_resume: a paused sandbox wakes for any call that needs it
                running (exec, files, terminal, processes, its ports) before
                the call goes on; without it such a call raises
                :class:`~warren.ConflictError` while it is paused.
            idempotency_key: the request's idempotency key: however often
                it is sent with it, from any process, it makes one sandbox
                and answers the same. Default: a key of its own, which makes
                its retries (after a broken connection, a 502 or a 503) safe.
            client: the client to use (default: :func:`default_client`).

        Raises:
            BadRequestError: an argument is invalid, e.g. a network entry
                that is neither an IPv4 address, a CIDR nor a domain name
                (the message names it).
            TooManyRequestsError: past the tenant's quota.
        """
        client = client or default_client()
        body = _sandbox_body(runtime=runtime, cpus=cpus, memory_mb=memory_mb, pids=pids, timeout=timeout,
                             env=env, metadata=metadata, workspace_mb=workspace_mb, network=network,
                             region=region, node_labels=node_labels, checkpoint_every=checkpoint_every,
                             persistence=persistence, on_timeout=on_timeout, idle_timeout=idle_timeout,
                             paused_ttl=paused_ttl, auto_resume=auto_resume)
        if template is not None:
            body["template"] = template
        if disk_mb is not None:
            body["disk_mb"] = disk_mb
        answer = client.transport.request("POST", "/v1/sandboxes", json_body=body, retry=IDEMPOTENT,
                                          idempotency_key=_once(idempotency_key))
        return cls(SandboxInfo.from_json(answer.json()), client)

    @classmethod
    def restore(
        cls,
        snapshot: Union[Snapshot, str],
        count: int = 1,
        *,
        runtime: Optional[str] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        workspace_mb: Optional[int] = None,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional[NetworkArg] = None,
        region: Optional[str] = None,
        node_labels: Optional[Mapping[str, str]] = None,
        checkpoint_every: Optional[float] = None,
        persistence: Optional[str] = None,
        on_timeout: Optional[str] = None,
        idle_timeout: Optional[float] = None,
        paused_ttl: Optional[float] = None,
        auto_resume: Optional[bool] = None,
        idempotency_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> List["Sandbox"]:
        """Fork: start count sandboxes from a snapshot, in parallel, and
        return them once all of them run. Each has the snapshot's disk and a
        fresh identity (its own id and hostname); its ``info.origin`` is the
        snapshot's id. All or nothing: if one fails to start, the others are
        deleted and the error is raised.

        Each sandbox is a context manager; to delete them all at the end of
        a block, enter each in a :class:`contextlib.ExitStack`.

        Args:
            snapshot: a :class:`Snapshot`, its id or its name. A pending
                snapshot can be restored on the node that took it.
            count: how many sandboxes (the server allows 1 to 256).
            runtime, cpus, memory_mb, pids, timeout, env, metadata, network:
                as for :meth:`create`, for every one of them; the disk size
                is the snapshot's. A snapshot carries no egress policy:
                without network, each gets the default. A workspace
                snapshot comes back as /workspace on a fresh root disk from
                its template.
            workspace_mb: an empty workspace disk for each sandbox restored
                from a root snapshot.
            region, node_labels, checkpoint_every, persistence, on_timeout,
                idle_timeout, paused_ttl, auto_resume, idempotency_key: as
                for :meth:`create`; an always-on disk starts at once,
                reading the snapshot's blocks as it wants them.
            client: the client to use (default: the snapshot's, else
                :func:`default_client`).

        Raises:
            BadRequestError: count is out of range (below 1 without asking
                the server), or another argument is invalid.
            NotFoundError: there is no such snapshot (deleted, or another
                tenant's).
        """
        client = _client_of(snapshot, client)
        sid = _snapshot_id(snapshot)
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"count must be an int, not {type(count).__name__}")
        if count < 1:
            # The API reads a count of 0 as "the default, 1": refuse it here.
            raise BadRequestError(f"count must be at least 1, got {count}")
        body = _sandbox_body(runtime=runtime, cpus=cpus, memory_mb=memory_mb, pids=pids, timeout=timeout,
                             env=env, metadata=metadata, workspace_mb=workspace_mb, network=network,
                             region=region, node_labels=node_labels, checkpoint_every=checkpoint_every,
                             persistence=persistence, on_timeout=on_timeout, idle_timeout=idle_timeout,
                             paused_ttl=paused_ttl, auto_resume=auto_resume)
        body["count"] = count
        t = client.transport.timeout
        answer = client.transport.request(
            "POST", path_of("v1", "snapshots", sid, "restore"), json_body=body, retry=IDEMPOTENT,
            timeout=None if t is None else max(t, _RESTORE_TIMEOUT), idempotency_key=_once(idempotency_key),
        )
        return [cls(SandboxInfo.from_json(d), client) for d in answer.json().get("sandboxes") or []]

    @classmethod
    def get(cls, sandbox_id: str, *, client: Optional[Client] = None) -> "Sandbox":
        """The sandbox with this id (running or recently ended).

        Raises:
            NotFoundError: there is none (or it belongs to another tenant).
        """
        client = client or default_client()
        if not sandbox_id:
            raise ValueError("empty sandbox id")
        answer = client.transport.request("GET", path_of("v1", "sandboxes", sandbox_id), retry=IDEMPOTENT)
        return cls(SandboxInfo.from_json(answer.json()), client)

    @classmethod
    def list(cls, *, state: States = None, client: Optional[Client] = None) -> List["Sandbox"]:
        """Your sandboxes, oldest first; recently ended ones included (see
        each one's ``state``) unless state keeps only some (``starting``,
        ``running``, ``paused``, ``stopped``, ``failed``: one or several).
        A listed sandbox's ``info.env`` is empty: :meth:`get` has it. Follows
        every page; retried as reads are."""
        return list(cls.iter(state=state, client=client))

    @classmethod
    def iter(cls, *, state: States = None, client: Optional[Client] = None) -> Iterator["Sandbox"]:
        """:meth:`list`, yielded a page at a time."""
        return iterate(lambda token: cls.list_page(state=state, limit=MAX_LIST_LIMIT, page_token=token, client=client))

    @classmethod
    def list_page(
        cls, *, state: States = None, limit: Optional[int] = None, page_token: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> Page["Sandbox"]:
        """One page of :meth:`list`: at most limit sandboxes (default 100,
        at most 1000), after the page whose ``next_page_token`` is
        page_token."""
        client = client or default_client()
        return fetch_page(
            client.transport, "/v1/sandboxes", "sandboxes", lambda d: cls(SandboxInfo.from_json(d), client),
            state=state, limit=limit, page_token=page_token,
        )

    # -- what it is ----------------------------------------------------------

    @property
    def id(self) -> str:
        """The sandbox's id, e.g. ``sb-...``."""
        return self._info.id

    @property
    def info(self) -> SandboxInfo:
        """The sandbox as of the last call that returned it."""
        return self._info

    @property
    def state(self) -> str:
        """The state as of the last call that returned it (see
        :meth:`refresh`)."""
        return self._info.state

    @property
    def isolation(self) -> str:
        """What separates it from the host, e.g. ``"container (shared host
        kernel)"``."""
        return self._info.isolation

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} {self._info.state} ({self._info.isolation})>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id and other.client is self.client

    def __hash__(self) -> int:
        return hash(self.id)

    def refresh(self) -> SandboxInfo:
        """Fetch the sandbox's current state and return it."""
        answer = self._transport.request("GET", self._path(), retry=IDEMPOTENT)
        self._info = SandboxInfo.from_json(answer.json())
        return self._info

    def is_running(self) -> bool:
        """Fetch the state and report whether it is running."""
        try:
            return self.refresh().state == "running"
        except NotFoundError:
            return False

    # -- its life ------------------------------------------------------------

    def set_timeout(self, seconds: float) -> SandboxInfo:
        """Make the sandbox expire this many seconds from now (at least 1)
        and return its updated info.

        Raises:
            SandboxGoneError: it is not running any more.
        """
        answer = self._transport.request(
            "POST", self._path("timeout"), json_body={"timeout_seconds": _seconds(seconds, "timeout")}, retry=REFUSED
        )
        self._info = SandboxInfo.from_json(answer.json())
        return self._info

    def pause(self) -> SandboxInfo:
        """Pause the sandbox, durably: its root disk becomes a durable
        snapshot in the blob store before this returns, and it wakes from
        it under the same id with the same files, on this node or another.
        A vm or gvisor sandbox keeps its memory too: its processes go on
        where they were when it resumes (``info.paused.memory`` true). A
        container stops: it wakes from its disk and its processes start
        again (``info.paused.memory`` false). While paused, exec, files,
        processes, terminals and its ports raise
        :class:`~warren.ConflictError`, unless it was created with
        ``auto_resume``, which wakes it for them; it is deleted once its
        ``paused_ttl`` passes. Returns its info (state ``paused``,
        ``paused`` set).

        Raises:
            ConflictError: it is not running, or it has a workspace or an
                always-on disk.
        """
        answer = self._transport.request("POST", self._path("pause"), retry=REFUSED)
        self._info = SandboxInfo.from_json(answer.json())
        return self._info

    def resume(self) -> SandboxInfo:
        """Run a paused sandbox again under its id, with its files: from
        its memory where it kept it (its processes carry on where they
        were), else from its pause snapshot (its processes start again).
        Its timeout counts again from now. Returns its info (state
        ``running``).

        Raises:
            ConflictError: it is not paused.
        """
        answer = self._transport.request("POST", self._path("resume"), retry=REFUSED)
        self._info = SandboxInfo.from_json(answer.json())
        return self._info

    # -- network -------------------------------------------------------------

    def metrics(self) -> SandboxMetrics:
        """The running sandbox's resource use, measured by its agent: the
        CPU share since the previous call (of anyone), memory, disk and
        tasks. :class:`~warren.errors.ConflictError` when it is not
        running."""
        return SandboxMetrics.from_json(self._get(self._path("metrics")))

    def network(self) -> NetworkStatus:
        """The sandbox's network: its egress ``policy``, its ``address``
        and ``gateway``, and how many connections and DNS queries the
        policy ``denied`` (and the rate limit refused) so far."""
        return NetworkStatus.from_json(self._get(self._path("network")))

    def set_network(
        self,
        policy: Optional[NetworkArg] = None,
        *,
        none: bool = False,
        allow: Sequence[str] = (),
        deny: Sequence[str] = (),
        rules: Optional[Mapping[str, Sequence[Any]]] = None,
    ) -> NetworkStatus:
        """Replace the sandbox's egress policy whole, and return its network
        then. The new policy holds at once for new connections and DNS
        queries (connections already open are not cut).

        Give either a policy (a :class:`~warren.NetworkPolicy` or a dict of
        its fields) or its fields as keywords, not both::

            sb.set_network(allow=["pypi.org", "*.pythonhosted.org"])
            sb.set_network(NetworkPolicy(none=True))
            sb.set_network(allow=["api.openai.com"], rules={"api.openai.com": [
                NetworkRule(headers={"Authorization": "Bearer ${secrets.openai}"})]})
            sb.set_network()                  # back to the default

        Nothing kept from the old policy: with neither, the policy becomes
        the default (the internet, not private ranges). Also updates
        ``info.network``. Retried like a read (setting the same policy
        twice is harmless).

        Raises:
            BadRequestError: an entry is neither an IPv4 address, a CIDR
                nor a domain name, or a rule is not one or names a secret
                you do not have (the message names it); the policy is
                unchanged.
            SandboxGoneError: the sandbox is not running.
        """
        if policy is not None:
            if none or allow or deny or rules:
                raise TypeError("set_network takes a policy or none/allow/deny/rules, not both")
            pol = _policy_of(policy)
        else:
            pol = NetworkPolicy(none=none, allow=allow, deny=deny, rules=rules)
        answer = self._transport.request("PUT", self._path("network"), json_body=pol.to_json(), retry=IDEMPOTENT)
        status = NetworkStatus.from_json(answer.json())
        self._info = dataclasses.replace(self._info, network=status.policy)
        return status

    # -- exposed ports -------------------------------------------------------

    def preview(self) -> Preview:
        """How the sandbox's ports are reached on the server's preview host
        names: whether anyone may (``public``), its access ``token``, and
        the ``url`` with ``{port}`` for the port (None when the server has
        no preview domain)."""
        return Preview.from_json(self._get(self._path("preview")))

    def set_preview(self, public: Optional[bool] = None, rotate_token: bool = False) -> Preview:
        """Make the sandbox's previews public (True) or private (False; None
        leaves it), and with rotate_token give it a new access token: the
        old one, and browser cookies made from it, stop working at once.
        Returns the result.

        Retried like a read unless it rotates (a repeat would rotate
        again).
        """
        body: Dict[str, Any] = {}
        if public is not None:
            body["public"] = bool(public)
        if rotate_token:
            body["rotate_token"] = True
        answer = self._transport.request(
            "PUT", self._path("preview"), json_body=body, retry=REFUSED if rotate_token else IDEMPOTENT
        )
        return Preview.from_json(answer.json())

    def port_url(self, port: int, *, with_token: bool = True) -> str:
        """The URL that opens one of the sandbox's ports.

        With a preview domain on the server: the port's preview URL,
        carrying the access token (``?warren_token=…``: a browser is
        redirected without it and keeps a cookie) when the preview is
        private and with_token is set. Without one: the API's URL of the
        port (``…/v1/sandboxes/ID/ports/PORT/``), which needs the API key
        (``Authorization: Bearer``).
        """
        u = self.preview().port_url(port, with_token=with_token)
        if u is not None:
            return u
        return self.client.url + self._path("ports", str(port)) + "/"

    def delete(self) -> None:
        """Stop the sandbox and delete its disk. Deleting an ended sandbox
        forgets it. Retried, since repeating it is harmless.

        Raises:
            NotFoundError: there is no such sandbox (any more).
        """
        self._transport.request("DELETE", self._path(), retry=IDEMPOTENT, gone_is_done=True)
        self._info = dataclasses.replace(self._info, state="stopped")

    def kill(self) -> None:
        """Same as :meth:`delete`."""
        self.delete()

    # -- snapshots -----------------------------------------------------------

    def snapshot(
        self, wait: bool = False, wait_timeout: Optional[float] = None, scope: str = "root",
        *, name: Optional[str] = None, idempotency_key: Optional[str] = None,
    ) -> Snapshot:
        """Save the sandbox's disk and return the snapshot. The sandbox's
        filesystem is synced and its disk cloned (``ack_duration``) while
        it runs on (a vm's is frozen for the clone).

        Args:
            scope: ``"root"`` (the root disk, the whole system) or
                ``"workspace"`` (only the workspace disk at /workspace, for a
                sandbox created with ``workspace_mb``).
            wait: return only once the snapshot is durable (stored and
                verified in the blob store) or failed; otherwise return at
                once, with it pending while it uploads in the background
                (it can already be restored on this node).
            wait_timeout: with wait, seconds to wait at most (the server's
                default is 600).
            name: a name for the snapshot, which stands for its id wherever
                one is taken (:func:`get_snapshot`, :meth:`restore`,
                :func:`delete_snapshot`) until it is deleted: 1 to 63
                letters, digits, ``.``, ``_`` and ``-``, starting with a
                letter or a digit and not with ``sn-``.
            idempotency_key: as for :meth:`create`: one snapshot however
                often it is sent.

        Raises:
            BadRequestError: the name is not a valid one.
            ConflictError: another of your snapshots has the name.
            SandboxGoneError: the sandbox is not running.
            RequestTimeout: with wait, it was not durable in time; it stays
                pending (find it with :meth:`snapshots`, then
                :meth:`Snapshot.wait`).
        """
        body: Dict[str, Any] = {}
        if scope != "root":
            body["scope"] = scope
        if name is not None:
            body["name"] = name
        sock_timeout: Union[float, None, str] = "default"
        if wait:
            body["wait"] = True
            server_wait = _SNAPSHOT_WAIT
            if wait_timeout is not None:
                if wait_timeout <= 0:
                    raise ValueError(f"wait_timeout must be positive, not {wait_timeout}")
                body["wait_timeout_seconds"] = max(1, math.ceil(wait_timeout))
                server_wait = float(body["wait_timeout_seconds"])
            if self._transport.timeout is not None:
                sock_timeout = max(self._transport.timeout, server_wait + _TIMEOUT_MARGIN)
        elif wait_timeout is not None:
            raise ValueError("wait_timeout is for wait=True")
        answer = self._transport.request(
            "POST", self._path("snapshots"), json_body=body, retry=IDEMPOTENT, timeout=sock_timeout,
            idempotency_key=_once(idempotency_key),
        )
        return Snapshot.from_json(answer.json(), self.client)

    def fork(
        self,
        count: int = 1,
        *,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional[NetworkArg] = None,
        checkpoint_every: Optional[float] = None,
        persistence: Optional[str] = None,
        on_timeout: Optional[str] = None,
        idle_timeout: Optional[float] = None,
        paused_ttl: Optional[float] = None,
        auto_resume: Optional[bool] = None,
        idempotency_key: Optional[str] = None,
    ) -> List["Sandbox"]:
        """Start count children of this running sandbox and return them
        once all of them run: its root disk is snapshotted (a container's
        synced and cloned while it runs; a vm's or gvisor sandbox's cloned
        while it is stopped and its memory saved) and each child starts from
        that snapshot, its ``info.origin``, with a fresh identity; a vm's or
        gvisor sandbox's children start from its memory too, its processes running on in
        each (docs/API.md, "Fork"). An argument not given takes this
        sandbox's value (resources, env, metadata, egress policy,
        checkpoint policy, time to live); its lifecycle (``on_timeout``,
        ``idle_timeout``, ``paused_ttl``, ``auto_resume``, as for
        :meth:`create`) is the parent's unless one of them is given, and
        then those given, the rest defaults. All or nothing.

        Raises:
            BadRequestError: count is out of range, or a vm's children
                were asked for another memory size or vCPU count.
            ConflictError: the sandbox is a container with a workspace
                disk.
            SandboxGoneError: the sandbox is not running.
        """
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"count must be an int, not {type(count).__name__}")
        if count < 1:
            raise BadRequestError(f"count must be at least 1, got {count}")
        body = _sandbox_body(runtime=None, cpus=cpus, memory_mb=memory_mb, pids=pids, timeout=timeout, env=env,
                             metadata=metadata, network=network, checkpoint_every=checkpoint_every,
                             persistence=persistence, on_timeout=on_timeout, idle_timeout=idle_timeout,
                             paused_ttl=paused_ttl, auto_resume=auto_resume)
        body["count"] = count
        t = self._transport.timeout
        answer = self._transport.request(
            "POST", self._path("fork"), json_body=body, retry=IDEMPOTENT,
            timeout=None if t is None else max(t, _RESTORE_TIMEOUT), idempotency_key=_once(idempotency_key),
        )
        return [Sandbox(SandboxInfo.from_json(d), self.client) for d in answer.json().get("sandboxes") or []]

    def snapshots(self, *, state: States = None) -> List[Snapshot]:
        """The sandbox's snapshots, oldest first (each one's ``parent``
        links them into a tree), in one of state if given. Follows every
        page."""
        return list(iterate(lambda token: self.snapshots_page(state=state, limit=MAX_LIST_LIMIT, page_token=token)))

    def snapshots_page(
        self, *, state: States = None, limit: Optional[int] = None, page_token: Optional[str] = None
    ) -> Page[Snapshot]:
        """One page of :meth:`snapshots` (default 100, at most 1000)."""
        return fetch_page(
            self._transport, self._path("snapshots"), "snapshots", lambda d: Snapshot.from_json(d, self.client),
            state=state, limit=limit, page_token=page_token,
        )

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.delete()
        except NotFoundError:
            pass

    # -- commands ------------------------------------------------------------

    def exec(
        self,
        cmd: Command,
        *,
        stdin: Union[bytes, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        tag: Optional[str] = None,
    ) -> ExecResult:
        """Run a command and return its result once it has ended.

        Args:
            cmd: a list of arguments run directly (``["python3", "-c",
                "print(1)"]``), or a string run by ``/bin/sh -c``.
            stdin: input written to the command, then closed (bytes, or
                text as UTF-8). It travels in the JSON request, whose size
                the server bounds (1 MiB); stream larger input with
                :meth:`start` and :meth:`Process.send_stdin`.
            env: environment variables, over the sandbox's.
            cwd: working directory (default the user's home).
            user: the user to run as (default root).
            timeout: seconds after which the command is killed; the result
                then has ``timed_out`` set and exit code 137.
            on_stdout: called with each piece of stdout, exact bytes, as it
                comes (in the calling thread). Setting either callback
                streams the command's events.
            on_stderr: likewise for stderr.
            tag: a label shown in :meth:`processes`.

        Returns:
            The result: stdout, stderr (text), exit_code, duration (seconds),
            timed_out. A non-zero exit code is not an error; use
            ``result.check()`` to make it one.

        Never retried.
        """
        body = _exec_body(cmd, stdin=stdin, env=env, cwd=cwd, user=user, timeout=timeout, tag=tag)
        if on_stdout is None and on_stderr is None:
            answer = self._transport.request(
                "POST", self._path("exec"), json_body=body, retry=NEVER, timeout=self._command_timeout(timeout)
            )
            return ExecResult.from_json(answer.json())
        out, err = _Output(), _Output()
        with self._exec_stream(body, timeout) as events:
            for ev in events:
                if ev.type == "stdout":
                    out.add(ev.data)
                    if on_stdout is not None:
                        on_stdout(ev.data)
                elif ev.type == "stderr":
                    err.add(ev.data)
                    if on_stderr is not None:
                        on_stderr(ev.data)
            end = events.result
        assert end is not None
        return dataclasses.replace(
            end, stdout=out.text(), stderr=err.text(), truncated=out.truncated or err.truncated
        )

    def exec_stream(
        self,
        cmd: Command,
        *,
        stdin: Union[bytes, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
        tag: Optional[str] = None,
        pty: Optional[Tuple[int, int]] = None,
    ) -> ExecStream:
        """Run a command and return its events as they happen (see
        :class:`ExecStream`); arguments as for :meth:`exec`. After the end
        event, the stream's ``result`` holds the outcome. With ``pty=(cols,
        rows)`` the command runs on a terminal of that size: its output
        comes as ``"pty"`` events.

        Example::

            with sb.exec_stream("make test") as events:
                for ev in events:
                    if ev.type == "stdout":
                        sys.stdout.buffer.write(ev.data)
            print(events.result.exit_code)

        Closing the stream before the end kills the command. Never retried.
        """
        body = _exec_body(cmd, stdin=stdin, env=env, cwd=cwd, user=user, timeout=timeout, tag=tag, pty=pty)
        return self._exec_stream(body, timeout)

    def _exec_stream(self, body: Dict[str, Any], timeout: Optional[float]) -> ExecStream:
        body = dict(body, stream=True)
        raw = self._transport.stream(
            "POST", self._path("exec"), json_body=body, retry=NEVER, timeout=self._command_timeout(timeout)
        )
        return ExecStream(raw, f"exec in {self.id}")

    @staticmethod
    def _command_timeout(timeout: Optional[float]) -> Optional[float]:
        """The socket timeout of a command's call: none for a command
        without a timeout, which may run for as long as it likes."""
        return None if timeout is None else timeout + _TIMEOUT_MARGIN

    def start(
        self,
        cmd: Command,
        *,
        stdin: Union[bytes, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
        tag: Optional[str] = None,
        pty: Optional[Tuple[int, int]] = None,
    ) -> Process:
        """Start a command in the background and return at once with its
        :class:`Process`; arguments as for :meth:`exec`. Its stdin stays
        open (after the optional initial ``stdin``) until
        :meth:`Process.send_stdin` closes it. With ``pty=(cols, rows)`` it
        runs on a terminal of that size: ``send_stdin`` types into it
        (closing is refused: send ``b"\\x04"``), :meth:`Process.resize`
        resizes it, and its output comes as ``"pty"`` events.

        Raises:
            BadRequestError: the command cannot be started (e.g. it does
                not exist).

        Never retried.
        """
        body = _exec_body(cmd, stdin=stdin, env=env, cwd=cwd, user=user, timeout=timeout, tag=tag, pty=pty)
        body["background"] = True
        doc = self._transport.request("POST", self._path("exec"), json_body=body, retry=NEVER).json()
        return Process(self, int(doc.get("pid") or 0), str(doc.get("tag") or ""))

    def processes(self, *, state: States = None) -> List[ProcessInfo]:
        """The processes the sandbox's agent started, by pid: running or
        ended, or only those in state (``running``, ``exited``). Follows
        every page."""
        return list(iterate(lambda token: fetch_page(
            self._transport, self._path("processes"), "processes", ProcessInfo.from_json,
            state=state, limit=MAX_LIST_LIMIT, page_token=token,
        )))

    def process(self, pid: int) -> Process:
        """A handle on a process this sandbox runs (or ran), by pid."""
        return Process(self, pid)

    # -- helpers of the SDK's modules ---------------------------------------

    def _path(self, *elems: str) -> str:
        return path_of("v1", "sandboxes", self.id, *elems)

    def _get(self, path: str, query: Optional[Mapping[str, Any]] = None) -> Any:
        return self._transport.request("GET", path, query=query, retry=IDEMPOTENT).json()
