"""Snapshots of sandboxes' disks: :class:`Snapshot`, and finding, deleting
and collecting them.

Take a snapshot with :meth:`Sandbox.snapshot`; fork it into running
sandboxes with :meth:`Sandbox.restore` (or :meth:`Snapshot.restore`)::

    with Sandbox.create() as sb:
        sb.files.write("/root/state.txt", "before the fork")
        snap = sb.snapshot()
    kids = Sandbox.restore(snap, count=8)   # 8 sandboxes with that disk
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Union

from ._pages import MAX_LIST_LIMIT, Page, States, fetch_page, iterate
from ._transport import IDEMPOTENT, REFUSED, path_of
from .client import Client, default_client
from .errors import RequestTimeout
from .models import GCResult, parse_time

if TYPE_CHECKING:
    from .sandbox import NetworkArg, Sandbox

__all__ = ["Snapshot", "get_snapshot", "list_snapshots", "delete_snapshot", "gc"]

# Polling of Snapshot.wait: the first delay, doubling up to the last.
_POLL_FIRST = 0.05
_POLL_MAX = 1.0


@dataclass(frozen=True)
class Snapshot:
    """A saved disk of a sandbox.

    ``state`` is ``pending`` from the moment the disk is cloned (the API
    answers then) while its layer uploads to the blob store, then
    ``durable`` (stored and verified: it survives the loss of the node) or
    ``failed`` (``error`` says why). A pending snapshot can already be
    restored on the node that took it.

    A Snapshot is an immutable value as of the call that returned it:
    :meth:`wait` returns the later state (``snap = snap.wait()``). Its
    methods use the client it came from.

    Attributes:
        id: the snapshot's id, e.g. ``sn-...``.
        name: the name it was given (:meth:`Sandbox.snapshot`), unique among
            your snapshots; every call that takes its id takes it too.
            Empty when it has none.
        sandbox_id: the sandbox it was taken of.
        scope: ``root`` (the root disk, the whole system) or ``workspace``
            (the workspace disk mounted at /workspace).
        template: the template that sandbox started from.
        state: ``pending``, ``durable`` or ``failed``.
        parent: the snapshot its layer is stored against (the sandbox's
            previous snapshot, or the snapshot the sandbox was restored
            from); empty when it is against the template. The rest of the
            chain: :meth:`lineage`.
        error: why a failed snapshot failed.
        disk_bytes: the size of the saved disk.
        changed_bytes: the data in its layer, what differs from its parent
            (known once durable).
        stored_bytes: what its layer added to the blob store, compressed and
            without chunks the tenant's snapshots had stored already (known
            once durable); another tenant's chunks are never shared.
        created_at: when it was taken.
        durable_at: when it became durable; None until then.
        ack_duration: seconds taking it held the sandbox's writes (its
            filesystem synced and its disk cloned).
        upload_duration: seconds the upload took, once durable.
    """

    id: str
    sandbox_id: str
    template: str
    state: str
    scope: str = "root"
    name: str = ""
    parent: str = ""
    error: str = ""
    disk_bytes: int = 0
    changed_bytes: int = 0
    stored_bytes: int = 0
    created_at: Optional[datetime] = None
    durable_at: Optional[datetime] = None
    ack_duration: float = 0.0
    upload_duration: float = 0.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any], client: Optional[Client] = None) -> "Snapshot":
        """Build from the API's Snapshot object; its methods will use
        client (default: :func:`default_client` at the time of the call)."""
        sn = cls(
            id=str(d.get("id") or ""),
            sandbox_id=str(d.get("sandbox_id") or ""),
            template=str(d.get("template") or ""),
            state=str(d.get("state") or ""),
            scope=str(d.get("scope") or "root"),
            name=str(d.get("name") or ""),
            parent=str(d.get("parent") or ""),
            error=str(d.get("error") or ""),
            disk_bytes=int(d.get("disk_bytes") or 0),
            changed_bytes=int(d.get("changed_bytes") or 0),
            stored_bytes=int(d.get("stored_bytes") or 0),
            created_at=parse_time(d.get("created_at")),
            durable_at=parse_time(d.get("durable_at")),
            ack_duration=float(d.get("ack_ms") or 0) / 1000.0,
            upload_duration=float(d.get("upload_ms") or 0) / 1000.0,
        )
        # Not a dataclass field: asdict(), == and repr leave the client out.
        object.__setattr__(sn, "_client", client)
        return sn

    @property
    def client(self) -> Client:
        """The client the snapshot's methods use."""
        return getattr(self, "_client", None) or default_client()

    def lineage(self) -> List[str]:
        """Every ancestor's id, nearest first: ``parent``, its parent, and
        so on up to the chain's first snapshot (also through ancestors
        deleted since). Follows every page; retried as reads are."""
        return list(iterate(lambda token: self.lineage_page(page_token=token)))

    def lineage_page(self, *, limit: Optional[int] = None, page_token: Optional[str] = None) -> Page[str]:
        """One page of :meth:`lineage` (at most limit ids, default and at
        most 1000)."""
        return fetch_page(
            self.client.transport, path_of("v1", "snapshots", self.id, "lineage"), "ancestors", str,
            limit=limit, page_token=page_token,
        )

    @property
    def is_pending(self) -> bool:
        """Whether its upload is still in progress."""
        return self.state == "pending"

    @property
    def is_durable(self) -> bool:
        """Whether it is stored and verified in the blob store."""
        return self.state == "durable"

    @property
    def is_failed(self) -> bool:
        """Whether its upload failed (see ``error``)."""
        return self.state == "failed"

    def restore(
        self,
        count: int = 1,
        *,
        runtime: Optional[str] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional["NetworkArg"] = None,
        checkpoint_every: Optional[float] = None,
        persistence: Optional[str] = None,
        on_timeout: Optional[str] = None,
        idle_timeout: Optional[float] = None,
        paused_ttl: Optional[float] = None,
        auto_resume: Optional[bool] = None,
    ) -> List["Sandbox"]:
        """Start count sandboxes from this snapshot; see
        :meth:`Sandbox.restore`."""
        from .sandbox import Sandbox

        return Sandbox.restore(
            self, count, runtime=runtime, cpus=cpus, memory_mb=memory_mb, pids=pids, timeout=timeout,
            env=env, metadata=metadata, network=network, checkpoint_every=checkpoint_every,
            persistence=persistence, on_timeout=on_timeout, idle_timeout=idle_timeout, paused_ttl=paused_ttl,
            auto_resume=auto_resume,
        )

    def delete(self) -> None:
        """Delete the snapshot; see :func:`delete_snapshot`."""
        delete_snapshot(self.id, client=self.client)

    def refresh(self) -> "Snapshot":
        """Fetch the snapshot's current state and return it (this object
        does not change)."""
        return get_snapshot(self.id, client=self.client)

    def wait(self, timeout: Optional[float] = 600.0) -> "Snapshot":
        """Poll the snapshot until it is no longer pending, and return it
        then: durable, or failed (see ``error``). Polls back off from 50 ms
        to 1 s.

        Args:
            timeout: seconds to wait at most; None waits without limit.

        Raises:
            RequestTimeout: it is still pending after timeout seconds (the
                upload goes on).
            NotFoundError: it was deleted meanwhile.
        """
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must not be negative, not {timeout}")
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_FIRST
        sn = self
        while sn.is_pending:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimeout(f"snapshot {self.id} is still pending after {timeout}s")
                time.sleep(min(delay, left))
            else:
                time.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
            sn = sn.refresh()
        return sn


def _snapshot_id(snapshot: Union[Snapshot, str]) -> str:
    """The id of a Snapshot, or the id (or name) itself; an empty one is a
    ValueError."""
    sid = snapshot.id if isinstance(snapshot, Snapshot) else str(snapshot)
    if not sid:
        raise ValueError("empty snapshot id")
    return sid


def _client_of(snapshot: Union[Snapshot, str], client: Optional[Client]) -> Client:
    """The client given, else the snapshot's own, else the default."""
    if client is not None:
        return client
    if isinstance(snapshot, Snapshot):
        return snapshot.client
    return default_client()


def get_snapshot(snapshot_id: str, *, client: Optional[Client] = None) -> Snapshot:
    """The snapshot with this id, or of this name: one of yours on this
    node, or a durable one another node sharing the blob store took.
    Retried as reads are.

    Raises:
        NotFoundError: there is none (deleted, or another tenant's).
    """
    client = client or default_client()
    sid = _snapshot_id(snapshot_id)
    doc = client.transport.request("GET", path_of("v1", "snapshots", sid), retry=IDEMPOTENT).json()
    return Snapshot.from_json(doc, client)


def list_snapshots(*, state: States = None, client: Optional[Client] = None) -> List[Snapshot]:
    """Your snapshots on this node, oldest first (one sandbox's:
    :meth:`Sandbox.snapshots`), in one of state (``pending``, ``durable``,
    ``failed``; one or several; all by default). Follows every page;
    retried as reads are."""
    return list(iter_snapshots(state=state, client=client))


def iter_snapshots(*, state: States = None, client: Optional[Client] = None) -> Iterator[Snapshot]:
    """:func:`list_snapshots`, yielded a page at a time."""
    return iterate(lambda token: list_snapshots_page(state=state, limit=MAX_LIST_LIMIT, page_token=token, client=client))


def list_snapshots_page(
    *, state: States = None, limit: Optional[int] = None, page_token: Optional[str] = None,
    client: Optional[Client] = None,
) -> Page[Snapshot]:
    """One page of :func:`list_snapshots`: at most limit (default 100, at
    most 1000), after the page whose ``next_page_token`` is page_token."""
    client = client or default_client()
    return fetch_page(
        client.transport, "/v1/snapshots", "snapshots", lambda d: Snapshot.from_json(d, client),
        state=state, limit=limit, page_token=page_token,
    )


def delete_snapshot(snapshot: Union[Snapshot, str], *, client: Optional[Client] = None) -> None:
    """Delete a snapshot (a :class:`Snapshot`, its id or its name), which
    frees its name: restores of it are refused from then on, on every node. Sandboxes restored from it go on,
    and its layer stays in the blob store while a descendant needs it.
    Retried, since repeating it is harmless (a 404 after a lost answer
    counts as done).

    Raises:
        NotFoundError: there is no such snapshot (any more).
    """
    client = _client_of(snapshot, client)
    client.transport.request(
        "DELETE", path_of("v1", "snapshots", _snapshot_id(snapshot)), retry=IDEMPOTENT, gone_is_done=True
    )


def gc(grace_seconds: Optional[float] = None, *, client: Optional[Client] = None) -> GCResult:
    """Collect the snapshot layers and chunks in the blob store that nothing
    needs any more; needs the admin key. Retried only when the connection
    was refused.

    Args:
        grace_seconds: spare objects younger than this, for uploads in
            flight on other nodes sharing the blob store (default: the
            server's, an hour). 0 suits a blob store only this node writes.

    Raises:
        ForbiddenError: the key is not the admin key.
    """
    client = client or default_client()
    body: Dict[str, Any] = {}
    if grace_seconds is not None:
        if grace_seconds < 0:
            raise ValueError(f"grace_seconds must not be negative, not {grace_seconds}")
        body["grace_seconds"] = int(math.ceil(grace_seconds))
    doc = client.transport.request("POST", "/v1/gc", json_body=body, retry=REFUSED).json()
    return GCResult.from_json(doc)
