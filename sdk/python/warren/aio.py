"""asyncio front end of the SDK: the same API, awaitable.

Each call runs the synchronous SDK in a worker thread
(:func:`asyncio.to_thread`), so the event loop never blocks and the
connection pool, retries and errors are exactly those of the synchronous
API. Cancelling an awaiting task abandons the call's result but does not
stop the call itself; bound commands with their ``timeout`` instead.

Example::

    import asyncio
    from warren.aio import AsyncSandbox

    async def main():
        async with await AsyncSandbox.create() as sb:
            results = await asyncio.gather(*(sb.exec(["echo", str(i)]) for i in range(8)))
            print([r.stdout for r in results])
            snap = await sb.snapshot()
        kids = await AsyncSandbox.restore(snap, count=4)   # fork: 4 sandboxes with its disk
        try:
            print(await asyncio.gather(*(k.exec("hostname") for k in kids)))
        finally:
            await asyncio.gather(*(k.delete() for k in kids))
            await snap.delete()

    asyncio.run(main())
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, List, Mapping, Optional, Sequence, TypeVar, Union

from . import snapshots as _snapshots
from .client import Client
from .files import Files
from .models import ExecEvent, ExecResult, FileInfo, GCResult, NetworkStatus, Preview, ProcessInfo, SandboxInfo, SandboxMetrics
from .sandbox import ExecStream, NetworkArg, Process, Sandbox
from .snapshots import Snapshot

__all__ = [
    "AsyncSandbox",
    "AsyncProcess",
    "AsyncFiles",
    "AsyncExecStream",
    "AsyncSnapshot",
    "get_snapshot",
    "list_snapshots",
    "delete_snapshot",
    "gc",
]

T = TypeVar("T")


async def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking SDK call in a worker thread."""
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


def _next_event(stream: ExecStream) -> Optional[ExecEvent]:
    """The stream's next event, or None at its end."""
    return next(stream, None)


class AsyncExecStream:
    """The events of a command, as an async iterator and async context
    manager; it opens on first use. See :class:`warren.ExecStream`."""

    def __init__(self, open_stream: Callable[[], ExecStream]) -> None:
        self._open = open_stream
        self._stream: Optional[ExecStream] = None

    async def _get(self) -> ExecStream:
        if self._stream is None:
            self._stream = await _run(self._open)
        return self._stream

    @property
    def result(self) -> Optional[ExecResult]:
        """The outcome (without output), once the end event was read."""
        return self._stream.result if self._stream is not None else None

    def __aiter__(self) -> "AsyncExecStream":
        return self

    async def __anext__(self) -> ExecEvent:
        stream = await self._get()
        ev = await _run(_next_event, stream)
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def aclose(self) -> None:
        """Stop reading (a streamed exec's command is killed)."""
        if self._stream is not None:
            await _run(self._stream.close)

    async def __aenter__(self) -> "AsyncExecStream":
        await self._get()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncFiles:
    """Awaitable :class:`warren.Files`."""

    def __init__(self, files: Files) -> None:
        self._files = files

    async def read(self, path: str, **kw: Any) -> bytes:
        """See :meth:`warren.Files.read`."""
        return await _run(self._files.read, path, **kw)

    async def read_text(self, path: str, **kw: Any) -> str:
        """See :meth:`warren.Files.read_text`."""
        return await _run(self._files.read_text, path, **kw)

    async def write(self, path: str, data: Any, **kw: Any) -> FileInfo:
        """See :meth:`warren.Files.write`."""
        return await _run(self._files.write, path, data, **kw)

    async def list(self, path: str = ".", **kw: Any) -> List[FileInfo]:
        """See :meth:`warren.Files.list`."""
        return await _run(self._files.list, path, **kw)

    async def stat(self, path: str) -> FileInfo:
        """See :meth:`warren.Files.stat`."""
        return await _run(self._files.stat, path)

    async def exists(self, path: str) -> bool:
        """See :meth:`warren.Files.exists`."""
        return await _run(self._files.exists, path)

    async def mkdir(self, path: str, **kw: Any) -> FileInfo:
        """See :meth:`warren.Files.mkdir`."""
        return await _run(self._files.mkdir, path, **kw)

    async def move(self, source: str, destination: str) -> FileInfo:
        """See :meth:`warren.Files.move`."""
        return await _run(self._files.move, source, destination)

    async def remove(self, path: str, **kw: Any) -> None:
        """See :meth:`warren.Files.remove`."""
        await _run(self._files.remove, path, **kw)


class AsyncProcess:
    """Awaitable :class:`warren.Process`."""

    def __init__(self, process: Process) -> None:
        #: The synchronous process handle.
        self.sync: Process = process

    @property
    def pid(self) -> int:
        """Its process id in the sandbox."""
        return self.sync.pid

    def __repr__(self) -> str:
        return f"<AsyncProcess {self.sync.pid} in {self.sync.sandbox.id}>"

    async def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """See :meth:`warren.Process.wait`."""
        return await _run(self.sync.wait, timeout)

    async def output(self, timeout: Optional[float] = None) -> ExecResult:
        """See :meth:`warren.Process.output`."""
        return await _run(self.sync.output, timeout)

    async def send_stdin(self, data: Any, close: bool = False) -> None:
        """See :meth:`warren.Process.send_stdin`."""
        await _run(self.sync.send_stdin, data, close)

    async def close_stdin(self) -> None:
        """See :meth:`warren.Process.close_stdin`."""
        await _run(self.sync.close_stdin)

    async def resize(self, cols: int, rows: int) -> None:
        """See :meth:`warren.Process.resize`."""
        await _run(self.sync.resize, cols, rows)

    async def signal(self, sig: Any) -> None:
        """See :meth:`warren.Process.signal`."""
        await _run(self.sync.signal, sig)

    async def kill(self) -> None:
        """See :meth:`warren.Process.kill`."""
        await _run(self.sync.kill)

    async def info(self) -> ProcessInfo:
        """See :meth:`warren.Process.info`."""
        return await _run(self.sync.info)

    def stream(self, replay: bool = True) -> AsyncExecStream:
        """See :meth:`warren.Process.stream`."""
        return AsyncExecStream(functools.partial(self.sync.stream, replay))


class AsyncSnapshot:
    """Awaitable :class:`warren.Snapshot`: ``info`` holds the snapshot's
    fields as of the last call that returned them."""

    def __init__(self, snapshot: Snapshot) -> None:
        #: The snapshot as of the last call that returned it.
        self.info: Snapshot = snapshot

    @property
    def id(self) -> str:
        """The snapshot's id."""
        return self.info.id

    @property
    def state(self) -> str:
        """``pending``, ``durable`` or ``failed``, as of the last call."""
        return self.info.state

    def __repr__(self) -> str:
        return f"<AsyncSnapshot {self.info.id} {self.info.state}>"

    async def lineage(self) -> List[str]:
        """See :meth:`warren.Snapshot.lineage`."""
        return await _run(self.info.lineage)

    async def refresh(self) -> Snapshot:
        """See :meth:`warren.Snapshot.refresh`; also updates ``info``."""
        self.info = await _run(self.info.refresh)
        return self.info

    async def wait(self, timeout: Optional[float] = 600.0) -> Snapshot:
        """See :meth:`warren.Snapshot.wait`; also updates ``info``."""
        self.info = await _run(self.info.wait, timeout)
        return self.info

    async def restore(self, count: int = 1, **kw: Any) -> List["AsyncSandbox"]:
        """See :meth:`warren.Sandbox.restore` (same arguments)."""
        return await AsyncSandbox.restore(self, count, **kw)

    async def delete(self) -> None:
        """See :meth:`warren.Snapshot.delete`."""
        await _run(self.info.delete)


def _sync_snapshot(snapshot: Union[AsyncSnapshot, Snapshot, str]) -> Union[Snapshot, str]:
    return snapshot.info if isinstance(snapshot, AsyncSnapshot) else snapshot


async def get_snapshot(snapshot_id: str, *, client: Optional[Client] = None) -> AsyncSnapshot:
    """See :func:`warren.get_snapshot`."""
    return AsyncSnapshot(await _run(_snapshots.get_snapshot, snapshot_id, client=client))


async def list_snapshots(*, client: Optional[Client] = None, **kw: Any) -> List[AsyncSnapshot]:
    """See :func:`warren.list_snapshots` (same arguments)."""
    return [AsyncSnapshot(sn) for sn in await _run(_snapshots.list_snapshots, client=client, **kw)]


async def delete_snapshot(
    snapshot: Union[AsyncSnapshot, Snapshot, str], *, client: Optional[Client] = None
) -> None:
    """See :func:`warren.delete_snapshot`."""
    await _run(_snapshots.delete_snapshot, _sync_snapshot(snapshot), client=client)


async def gc(grace_seconds: Optional[float] = None, *, client: Optional[Client] = None) -> GCResult:
    """See :func:`warren.gc`."""
    return await _run(_snapshots.gc, grace_seconds, client=client)


class AsyncSandbox:
    """Awaitable :class:`warren.Sandbox`; ``async with`` deletes it."""

    def __init__(self, sandbox: Sandbox) -> None:
        #: The synchronous sandbox.
        self.sync: Sandbox = sandbox
        #: Its filesystem.
        self.files: AsyncFiles = AsyncFiles(sandbox.files)

    @classmethod
    async def create(cls, template: Optional[str] = None, **kw: Any) -> "AsyncSandbox":
        """See :meth:`warren.Sandbox.create` (same arguments)."""
        return cls(await _run(Sandbox.create, template, **kw))

    @classmethod
    async def get(cls, sandbox_id: str, *, client: Optional[Client] = None) -> "AsyncSandbox":
        """See :meth:`warren.Sandbox.get`."""
        return cls(await _run(Sandbox.get, sandbox_id, client=client))

    @classmethod
    async def list(cls, *, client: Optional[Client] = None, **kw: Any) -> List["AsyncSandbox"]:
        """See :meth:`warren.Sandbox.list` (same arguments)."""
        return [cls(sb) for sb in await _run(Sandbox.list, client=client, **kw)]

    @classmethod
    async def restore(
        cls, snapshot: Union[AsyncSnapshot, Snapshot, str], count: int = 1, **kw: Any
    ) -> List["AsyncSandbox"]:
        """See :meth:`warren.Sandbox.restore` (same arguments): a list of
        running sandboxes, each an async context manager."""
        return [cls(sb) for sb in await _run(Sandbox.restore, _sync_snapshot(snapshot), count, **kw)]

    @property
    def id(self) -> str:
        """The sandbox's id."""
        return self.sync.id

    @property
    def info(self) -> SandboxInfo:
        """The sandbox as of the last call that returned it."""
        return self.sync.info

    def __repr__(self) -> str:
        return f"<AsyncSandbox {self.sync.id}>"

    async def refresh(self) -> SandboxInfo:
        """See :meth:`warren.Sandbox.refresh`."""
        return await _run(self.sync.refresh)

    async def set_timeout(self, seconds: float) -> SandboxInfo:
        """See :meth:`warren.Sandbox.set_timeout`."""
        return await _run(self.sync.set_timeout, seconds)

    async def pause(self) -> SandboxInfo:
        """See :meth:`warren.Sandbox.pause`."""
        return await _run(self.sync.pause)

    async def resume(self) -> SandboxInfo:
        """See :meth:`warren.Sandbox.resume`."""
        return await _run(self.sync.resume)

    async def metrics(self) -> SandboxMetrics:
        """See :meth:`warren.Sandbox.metrics`."""
        return await _run(self.sync.metrics)

    async def network(self) -> NetworkStatus:
        """See :meth:`warren.Sandbox.network`."""
        return await _run(self.sync.network)

    async def set_network(
        self,
        policy: Optional[NetworkArg] = None,
        *,
        none: bool = False,
        allow: Sequence[str] = (),
        deny: Sequence[str] = (),
        rules: Optional[Mapping[str, Sequence[Any]]] = None,
    ) -> NetworkStatus:
        """See :meth:`warren.Sandbox.set_network`."""
        return await _run(self.sync.set_network, policy, none=none, allow=allow, deny=deny, rules=rules)

    async def preview(self) -> Preview:
        """See :meth:`warren.Sandbox.preview`."""
        return await _run(self.sync.preview)

    async def set_preview(self, public: Optional[bool] = None, rotate_token: bool = False) -> Preview:
        """See :meth:`warren.Sandbox.set_preview`."""
        return await _run(self.sync.set_preview, public, rotate_token)

    async def port_url(self, port: int, *, with_token: bool = True) -> str:
        """See :meth:`warren.Sandbox.port_url`."""
        return await _run(self.sync.port_url, port, with_token=with_token)

    async def delete(self) -> None:
        """See :meth:`warren.Sandbox.delete`."""
        await _run(self.sync.delete)

    async def kill(self) -> None:
        """See :meth:`warren.Sandbox.kill`."""
        await _run(self.sync.kill)

    async def exec(self, cmd: Any, **kw: Any) -> ExecResult:
        """See :meth:`warren.Sandbox.exec`; callbacks run in a worker
        thread."""
        return await _run(self.sync.exec, cmd, **kw)

    def exec_stream(self, cmd: Any, **kw: Any) -> AsyncExecStream:
        """See :meth:`warren.Sandbox.exec_stream`: ``async for ev in
        sb.exec_stream(cmd)``."""
        return AsyncExecStream(functools.partial(self.sync.exec_stream, cmd, **kw))

    async def start(self, cmd: Any, **kw: Any) -> AsyncProcess:
        """See :meth:`warren.Sandbox.start`."""
        return AsyncProcess(await _run(self.sync.start, cmd, **kw))

    async def processes(self, **kw: Any) -> List[ProcessInfo]:
        """See :meth:`warren.Sandbox.processes` (same arguments)."""
        return await _run(self.sync.processes, **kw)

    async def snapshot(
        self, wait: bool = False, wait_timeout: Optional[float] = None, scope: str = "root",
        *, name: Optional[str] = None, idempotency_key: Optional[str] = None,
    ) -> AsyncSnapshot:
        """See :meth:`warren.Sandbox.snapshot`."""
        return AsyncSnapshot(await _run(self.sync.snapshot, wait, wait_timeout, scope, name=name,
                                        idempotency_key=idempotency_key))

    async def snapshots(self, **kw: Any) -> List[AsyncSnapshot]:
        """See :meth:`warren.Sandbox.snapshots` (same arguments)."""
        return [AsyncSnapshot(sn) for sn in await _run(self.sync.snapshots, **kw)]

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await _run(self.sync.__exit__, None, None, None)
