"""The events stream (docs/API.md, "Events"): what happens to the caller's
sandboxes and snapshots, as server-sent events, followed across cut
connections without losing or repeating one."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator, List, Mapping, Optional, Union

from ._transport import NEVER, Transport
from .errors import NetworkError, RequestTimeout, StreamBrokenError, WarrenError
from .models import parse_time

__all__ = ["Event", "EVENTS_LOST", "follow_events"]

#: The kind of the message a stream sends, with no ID, when the events
#: after the position it resumes from are older than the server's replay
#: window and gone.
EVENTS_LOST = "events.lost"

# A stream that says nothing for this long (it sends a keepalive every
# 15 s) is taken for cut, and followed again.
_READ_TIMEOUT = 60.0


@dataclass(frozen=True)
class Event:
    """One change of a sandbox, a snapshot or a fleet node.

    Attributes:
        id: its position in the stream (0 for an ``events.lost`` message).
        at: when it happened.
        kind: e.g. ``sandbox.created``, ``sandbox.restored``,
            ``sandbox.paused``, ``sandbox.auto_paused`` (its lifecycle
            paused it), ``sandbox.auto_resumed`` (a call woke it),
            ``snapshot.durable``, ``node.fenced``, or ``events.lost``.
        tenant, sandbox, snapshot, node: what it is about ("" for none).
        state: the state it left the thing in.
        reason: why a sandbox failed, ended, paused or woke (``idle for
            30s``, ``a call to its agent``), or a snapshot failed; for
            ``events.lost``, which events are gone.
    """

    id: int
    at: Optional[datetime]
    kind: str
    tenant: str = ""
    sandbox: str = ""
    snapshot: str = ""
    node: str = ""
    state: str = ""
    reason: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Event":
        """Build from the API's Event object."""
        return cls(
            id=int(d.get("id", 0)),
            at=parse_time(d.get("at")),
            kind=str(d.get("kind", "")),
            tenant=str(d.get("tenant", "")),
            sandbox=str(d.get("sandbox", "")),
            snapshot=str(d.get("snapshot", "")),
            node=str(d.get("node", "")),
            state=str(d.get("state", "")),
            reason=str(d.get("reason", "")),
        )


def follow_events(
    transport: Transport,
    *,
    sandbox: Optional[str] = None,
    snapshot: Optional[str] = None,
    kinds: Union[str, List[str], None] = None,
    after: Optional[int] = None,
    all_tenants: bool = False,
) -> Iterator[Event]:
    """Yield the events the filters select, in order, for as long as the
    caller iterates (see :meth:`warren.Client.events`)."""
    query: dict = {}
    if sandbox:
        query["sandbox"] = sandbox
    if snapshot:
        query["snapshot"] = snapshot
    if kinds:
        query["kind"] = kinds if isinstance(kinds, str) else ",".join(kinds)
    if all_tenants:
        query["all_tenants"] = "true"
    last = after
    attempt = 0
    while True:
        q = dict(query)
        if last is not None:
            q["after"] = last
        try:
            raw = transport.stream("GET", "/v1/events", query=q, retry=NEVER, timeout=_READ_TIMEOUT, accept="text/event-stream")
        except WarrenError as e:
            if not _transient(e):
                raise
            attempt += 1
            time.sleep(transport.delay(attempt))
            continue
        try:
            ident, kind, data = "", "", []
            while True:
                line = raw.readline()
                if not line:
                    raise StreamBrokenError("events: the stream ended")
                attempt = 0
                text = line.decode("utf-8").rstrip("\r\n")
                if text == "":
                    if ident:
                        last = int(ident)
                    if data:
                        yield _event(kind, "\n".join(data))
                    ident, kind, data = "", "", []
                    continue
                field, _, value = text.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "id":
                    ident = value
                elif field == "event":
                    kind = value
                elif field == "data":
                    data.append(value)
        except (NetworkError, RequestTimeout, StreamBrokenError):
            attempt += 1
            time.sleep(transport.delay(attempt))
        finally:
            raw.close()


def _transient(e: WarrenError) -> bool:
    """Report whether opening the stream may work if tried again."""
    return isinstance(e, (NetworkError, RequestTimeout)) or e.status == 429 or e.status >= 500


def _event(kind: str, data: str) -> Event:
    d = json.loads(data)
    if kind == EVENTS_LOST:
        return Event(
            id=0, at=None, kind=EVENTS_LOST,
            reason=f"the events after {d.get('after')} up to {d.get('oldest')} are gone: older than the replay window",
        )
    return Event.from_json(d)
