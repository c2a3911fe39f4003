"""Plain data the API returns, as frozen dataclasses.

Each ``from_json`` builds an instance from the API's JSON object and ignores
fields it does not know, so that a newer server does not break an older SDK.
Times are timezone-aware :class:`datetime.datetime` in UTC; durations are
seconds (float).
"""

from __future__ import annotations

import base64
import collections.abc
import re
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import CommandError, CommandTimeout

__all__ = [
    "NetworkPolicy",
    "NetworkRule",
    "Secret",
    "NetworkStatus",
    "SandboxInfo",
    "ExecResult",
    "ExecEvent",
    "ProcessInfo",
    "FileInfo",
    "Template",
    "RuntimeInfo",
    "NodeInfo",
    "GCResult",
    "Preview",
    "parse_time",
]

_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def parse_time(value: Optional[str]) -> Optional[datetime]:
    """Parse an RFC 3339 time as Go writes it (up to nanoseconds, ``Z`` or
    an offset) into an aware datetime in UTC; None for an empty value or Go's
    zero time."""
    if not value:
        return None
    m = _TIME.match(value)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {value!r}")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    frac = (m.group(7) or "")[:6].ljust(6, "0")
    t = datetime(year, month, day, hour, minute, second, int(frac), tzinfo=timezone.utc)
    if m.group(9):
        offset = timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
        t = t - offset if m.group(9) == "+" else t + offset
    if t.year == 1 and t.month == 1 and t.day == 1 and t.hour == 0 and t.minute == 0:
        return None
    return t


def _str_map(v: Any) -> Dict[str, str]:
    return {str(k): str(x) for k, x in (v or {}).items()}


def _entries(value: Any, what: str) -> Tuple[str, ...]:
    """A list of policy entries as a tuple of text. Only types are checked
    here: whether an entry is a valid CIDR, address or name is the server's
    to say (a 400 naming it)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what} must be a list of strings, not {type(value).__name__}")
    out = []
    for e in value:
        if not isinstance(e, str):
            raise TypeError(f"{what} entries must be strings, not {type(e).__name__}: {e!r}")
        out.append(e)
    return tuple(out)


class _Frozen(collections.abc.Mapping):
    """A read-only dict that hashes, so that a policy holding rules stays a
    hashable value as its tuples are."""

    __slots__ = ("_d",)

    def __init__(self, d: Mapping[Any, Any]) -> None:
        self._d = dict(d)

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(frozenset(self._d.items()))

    def __repr__(self) -> str:
        return repr(self._d)


def _headers(value: Any, what: str) -> Mapping[str, str]:
    """A rule's headers as a dict of text. Only types are checked here:
    the names and values are the server's to judge."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a dict of header names to values, not {type(value).__name__}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"{what} names and values must be strings: {k!r}: {v!r}")
        out[k] = v
    return _Frozen(out)


@dataclass(frozen=True)
class NetworkRule:
    """One egress rule of a destination (:attr:`NetworkPolicy.rules`):
    headers set on the sandbox's HTTP and HTTPS requests to it as they
    leave the node, each replacing any the sandbox sent of that name.

    A value may name one of your secrets as ``${secrets.NAME}`` (E2B's
    ``${e2b.secrets.NAME}`` too): the node puts the secret's value in, and
    the sandbox never holds it (:meth:`Client.set_secret`; docs/NETWORK.md,
    "Secrets at egress"). In the API it is
    ``{"transform": {"headers": {...}}}``; a dict of that shape does as well
    wherever a rule is taken.

    Example::

        NetworkRule(headers={"Authorization": "Bearer ${secrets.openai}"})
    """

    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", _headers(self.headers, "network rule headers"))

    def to_json(self) -> Dict[str, Any]:
        """The API's NetworkRule object."""
        return {"transform": {"headers": dict(self.headers)}}

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> "NetworkRule":
        """Build from the API's NetworkRule object."""
        transform = (d or {}).get("transform") or {}
        return cls(headers=_str_map(transform.get("headers")))


def _rule_of(value: Any, what: str) -> NetworkRule:
    """A rule given as a NetworkRule, or as the API's dict
    ``{"transform": {"headers": {...}}}``; another key is a TypeError."""
    if isinstance(value, NetworkRule):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a NetworkRule or a dict, not {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k != "transform")
    transform = value.get("transform") or {}
    if not isinstance(transform, Mapping):
        raise TypeError(f"{what} transform must be a dict, not {type(transform).__name__}")
    unknown += sorted("transform." + str(k) for k in transform if k != "headers")
    if unknown:
        raise TypeError(f"{what}: unknown field(s) {', '.join(unknown)}: want transform.headers")
    return NetworkRule(headers=_headers(transform.get("headers") or {}, f"{what} headers"))


def _rules(value: Any) -> Mapping[str, Tuple[NetworkRule, ...]]:
    """A policy's rules as a read-only dict of destinations to tuples of
    rules."""
    if value is None:
        return _Frozen({})
    if not isinstance(value, Mapping):
        raise TypeError(f"network rules must be a dict of destinations to lists of rules, not {type(value).__name__}")
    out = {}
    for dest, rules in value.items():
        if not isinstance(dest, str):
            raise TypeError(f"network rules destinations must be strings, not {type(dest).__name__}: {dest!r}")
        if isinstance(rules, (NetworkRule, Mapping, str, bytes)) or not hasattr(rules, "__iter__"):
            raise TypeError(f"network rules of {dest!r} must be a list of rules, not {type(rules).__name__}")
        out[dest] = tuple(_rule_of(r, f"network rule of {dest!r}") for r in rules)
    return _Frozen(out)


@dataclass(frozen=True)
class NetworkPolicy:
    """A sandbox's egress policy: what it may connect to (docs/NETWORK.md).

    ``NetworkPolicy()`` is the default: the internet, but not private
    ranges. Entries of ``allow`` and ``deny`` are IPv4 CIDRs
    (``"10.1.0.0/16"``), IPv4 addresses, or domain names (``"example.com"``
    that name only, ``"*.example.com"`` any name below it); the server
    checks them and refuses an invalid one with
    :class:`~warren.BadRequestError` naming it. Whatever the policy,
    link-local (the cloud metadata address), loopback, the node itself and
    other sandboxes are unreachable.

    Attributes:
        none: deny all egress, DNS included (exposed ports still reach the
            sandbox through the server's proxy).
        allow: when non-empty, the only egress allowed (plus what allowed
            names resolve to); it may open private ranges.
        deny: refused even when ``allow`` matches.
        rules: egress rules by destination, a name (``"api.example.com"``)
            or a wildcard (``"*.example.com"``): :class:`NetworkRule` s (or
            the API's dicts) whose headers are set on the sandbox's HTTP
            and HTTPS requests to it, naming your secrets as
            ``${secrets.NAME}``. A request takes the exact name's rules,
            else the longest wildcard's. Rules grant no access: ``none``,
            ``allow`` and ``deny`` still decide.

    The lists are kept as tuples (``allow=["a"]`` equals ``allow=("a",)``),
    the rules as a read-only dict of tuples of :class:`NetworkRule`, so that
    a policy is a hashable value. Only types are
    checked here (a string where a list belongs is a TypeError); the entries
    themselves are the server's to judge.

    Example::

        NetworkPolicy(allow=["pypi.org", "*.pythonhosted.org"], deny=["203.0.113.9"])
        NetworkPolicy(none=True)    # no network at all
        NetworkPolicy(allow=["api.openai.com"], rules={
            "api.openai.com": [NetworkRule(headers={"Authorization": "Bearer ${secrets.openai}"})]})
    """

    none: bool = False
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    rules: Mapping[str, Sequence[NetworkRule]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.none, bool):
            raise TypeError(f"network none must be a bool, not {type(self.none).__name__}")
        object.__setattr__(self, "allow", _entries(self.allow, "network allow"))
        object.__setattr__(self, "deny", _entries(self.deny, "network deny"))
        object.__setattr__(self, "rules", _rules(self.rules))

    @property
    def is_default(self) -> bool:
        """Whether this is the default policy (no rule of its own)."""
        return not self.none and not self.allow and not self.deny and not self.rules

    def to_json(self) -> Dict[str, Any]:
        """The API's NetworkPolicy object (empty fields left out, as the
        server writes it)."""
        d: Dict[str, Any] = {}
        if self.none:
            d["none"] = True
        if self.allow:
            d["allow"] = list(self.allow)
        if self.deny:
            d["deny"] = list(self.deny)
        if self.rules:
            d["rules"] = {dest: [r.to_json() for r in rules] for dest, rules in self.rules.items()}
        return d

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> "NetworkPolicy":
        """Build from the API's NetworkPolicy object (None or ``{}``: the
        default)."""
        d = d or {}
        return cls(
            none=bool(d.get("none")),
            allow=tuple(str(x) for x in d.get("allow") or []),
            deny=tuple(str(x) for x in d.get("deny") or []),
            rules={str(dest): tuple(NetworkRule.from_json(r) for r in rules or [])
                   for dest, rules in (d.get("rules") or {}).items()},
        )


def _policy_of(value: Union[NetworkPolicy, Mapping[str, Any]]) -> NetworkPolicy:
    """A policy given as a NetworkPolicy (returned as it is) or as a dict
    with the API's fields ``none``, ``allow``, ``deny`` and ``rules`` (each
    optional; None is the field's default). Another key, or a value of the
    wrong type, is a TypeError: the SDK would otherwise drop it silently."""
    if isinstance(value, NetworkPolicy):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"network must be a NetworkPolicy or a dict, not {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in ("none", "allow", "deny", "rules"))
    if unknown:
        raise TypeError(f"network: unknown field(s) {', '.join(unknown)}: want none, allow, deny, rules")
    none = value.get("none")
    return NetworkPolicy(none=False if none is None else none, allow=value.get("allow"), deny=value.get("deny"),
                         rules=value.get("rules"))


@dataclass(frozen=True)
class NetworkStatus:
    """A sandbox's network as :meth:`Sandbox.network` reports it.

    Attributes:
        policy: its egress policy.
        address: the sandbox's own address (the same in every sandbox,
            e.g. ``10.0.2.15``).
        gateway: its router and DNS server (e.g. ``10.0.2.2``).
        denied: connections and DNS queries the policy refused so far.
        rate_limited: new connections refused by the connection-rate limit.
    """

    policy: NetworkPolicy
    address: str = ""
    gateway: str = ""
    denied: int = 0
    rate_limited: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NetworkStatus":
        """Build from the API's NetworkStatus object."""
        return cls(
            policy=NetworkPolicy.from_json(d.get("policy")),
            address=str(d.get("address") or ""),
            gateway=str(d.get("gateway") or ""),
            denied=int(d.get("denied") or 0),
            rate_limited=int(d.get("rate_limited") or 0),
        )


@dataclass(frozen=True)
class SandboxMetrics:
    """A running sandbox's resource use as :meth:`Sandbox.metrics` reports
    it, measured by its agent from inside.

    Attributes:
        at: when the figures were read.
        cpu_used_pct: CPU time used since the previous metrics call (or
            over 100 ms when there was none in the last minute), as a
            percentage of ``cpu_count`` CPUs: 0 to 100.
        cpu_count: how many CPUs the sandbox may use.
        memory_used_bytes: memory in use, reclaimable page cache left out.
        memory_total_bytes: the memory the sandbox may use.
        memory_cache_bytes: the page cache.
        disk_used_bytes: bytes in use on the root filesystem.
        disk_total_bytes: the root filesystem's size.
        pids: the sandbox's tasks, threads included.
    """

    at: Optional[datetime]
    cpu_used_pct: float = 0.0
    cpu_count: int = 0
    memory_used_bytes: int = 0
    memory_total_bytes: int = 0
    memory_cache_bytes: int = 0
    disk_used_bytes: int = 0
    disk_total_bytes: int = 0
    pids: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxMetrics":
        """Build from the API's SandboxMetrics object."""
        return cls(
            at=parse_time(d.get("at")),
            cpu_used_pct=float(d.get("cpu_used_pct") or 0.0),
            cpu_count=int(d.get("cpu_count") or 0),
            memory_used_bytes=int(d.get("memory_used_bytes") or 0),
            memory_total_bytes=int(d.get("memory_total_bytes") or 0),
            memory_cache_bytes=int(d.get("memory_cache_bytes") or 0),
            disk_used_bytes=int(d.get("disk_used_bytes") or 0),
            disk_total_bytes=int(d.get("disk_total_bytes") or 0),
            pids=int(d.get("pids") or 0),
        )


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the API shows it at one moment.

    ``state`` is ``starting``, ``running``, ``paused``, ``stopped`` or
    ``failed`` (then ``error`` says why, and ``disk_kept`` whether it still
    holds its disks until ``expires_at``: a snapshot of it saves its work).
    ``isolation`` says honestly what
    separates it from the host, e.g. ``"container (shared host kernel)"``. ``origin`` is the id
    of the snapshot its root disk was restored from, empty for one made by
    create; ``workspace_mb`` the size of its workspace disk at /workspace
    (0: none) and ``workspace_origin`` the snapshot that disk came from.
    ``network`` is its egress policy (:class:`NetworkPolicy`; the default
    one when it was given none).

    In a fleet, ``state`` may also be ``moving``: its node was lost or
    drained, and it starts again on another node from its last checkpoint
    (``checkpoint_every`` seconds is its policy, 0 for none; ``checkpoint``
    its last one). ``restored`` says how it last came back
    (:class:`Restored`), None if it never did. ``persistence`` is
    ``"always"`` for an always-on root disk, else ``"snapshot"``; such a
    disk's write-back state is ``volume`` (:class:`Volume`), in a get of a
    running sandbox only.

    Its lifecycle says how it sleeps and wakes: ``on_timeout`` is what its
    timeout (and its idle timeout) does, ``"delete"`` or ``"pause"``;
    ``idle_timeout`` the seconds without use after which that happens (0:
    never); ``paused_ttl`` the seconds it stays paused before it is deleted;
    ``auto_resume`` whether a call that needs it running wakes it. While it
    is ``paused``, ``paused`` says how it sleeps (:class:`Paused`); None
    otherwise.
    """

    id: str
    template: str
    runtime: str
    isolation: str
    state: str
    cpus: float
    memory_mb: int
    pids: int
    disk_mb: int
    created_at: Optional[datetime]
    expires_at: Optional[datetime]
    env: Dict[str, str] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)
    error: str = ""
    disk_kept: bool = False
    origin: str = ""
    template_version: str = ""
    workspace_mb: int = 0
    workspace_origin: str = ""
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    checkpoint_every: int = 0
    checkpoint: Optional["Checkpoint"] = None
    restored: Optional["Restored"] = None
    persistence: str = "snapshot"
    volume: Optional["Volume"] = None
    on_timeout: str = "delete"
    idle_timeout: int = 0
    paused_ttl: int = 0
    auto_resume: bool = False
    paused: Optional["Paused"] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        """Build from the API's Sandbox object."""
        return cls(
            id=str(d.get("id", "")),
            template=str(d.get("template", "")),
            runtime=str(d.get("runtime", "")),
            isolation=str(d.get("isolation", "")),
            state=str(d.get("state", "")),
            cpus=float(d.get("cpus") or 0),
            memory_mb=int(d.get("memory_mb") or 0),
            pids=int(d.get("pids") or 0),
            disk_mb=int(d.get("disk_mb") or 0),
            created_at=parse_time(d.get("created_at")),
            expires_at=parse_time(d.get("expires_at")),
            env=_str_map(d.get("env")),
            metadata=_str_map(d.get("metadata")),
            error=str(d.get("error") or ""),
            disk_kept=bool(d.get("disk_kept")),
            origin=str(d.get("origin") or ""),
            template_version=str(d.get("template_version") or ""),
            workspace_mb=int(d.get("workspace_mb") or 0),
            workspace_origin=str(d.get("workspace_origin") or ""),
            network=NetworkPolicy.from_json(d.get("network")),
            checkpoint_every=int(d.get("checkpoint_every_seconds") or 0),
            checkpoint=Checkpoint.from_json(d["checkpoint"]) if d.get("checkpoint") else None,
            restored=Restored.from_json(d["restored"]) if d.get("restored") else None,
            persistence=str(d.get("persistence") or "snapshot"),
            volume=Volume.from_json(d["volume"]) if d.get("volume") else None,
            on_timeout=str(d.get("on_timeout") or "delete"),
            idle_timeout=int(d.get("idle_timeout_seconds") or 0),
            paused_ttl=int(d.get("paused_ttl_seconds") or 0),
            auto_resume=bool(d.get("auto_resume")),
            paused=Paused.from_json(d["paused"]) if d.get("paused") else None,
        )


@dataclass(frozen=True)
class Paused:
    """How a paused sandbox sleeps. Every pause is durable: its root disk
    is ``snapshot``, a durable snapshot it wakes from on any node.

    Attributes:
        at: when it paused.
        reason: why: ``"requested"``, or what paused it on its own (its
            timeout, or idle), e.g. ``"idle for 30s"``.
        auto: whether its lifecycle paused it.
        memory: whether its processes are kept and go on where they were
            when it resumes (vm, gvisor). False for a container (or a
            sandbox whose memory image cannot be restored): it wakes from
            its disk with its files, and its processes start again.
        snapshot: the durable snapshot of its root disk.
        workspace: the durable snapshot of its workspace disk, if any.
        image: the durable memory image it wakes from, with its
            processes, on a node other than its own (vm, gvisor); "" for
            none.
        held: whether its node holds it still, and resumes it in place.
    """

    at: Optional[datetime]
    reason: str
    auto: bool
    memory: bool
    snapshot: str
    workspace: str = ""
    image: str = ""
    held: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Paused":
        """Build from the API's Paused object."""
        return cls(
            at=parse_time(d.get("at")),
            reason=str(d.get("reason") or ""),
            auto=bool(d.get("auto")),
            memory=bool(d.get("memory")),
            snapshot=str(d.get("snapshot") or ""),
            workspace=str(d.get("workspace") or ""),
            image=str(d.get("image") or ""),
            held=bool(d.get("held")),
        )


@dataclass(frozen=True)
class Checkpoint:
    """A sandbox's last checkpoint: a durable snapshot its policy took."""

    snapshot: str
    at: Optional[datetime]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Checkpoint":
        """Build from the API's Checkpoint object."""
        return cls(snapshot=str(d.get("snapshot") or ""), at=parse_time(d.get("at")))


@dataclass(frozen=True)
class Volume:
    """An always-on disk's write-back state: ``layer``, the newest in the
    durable tier (every flushed write is in it or below it);
    ``recovery_point``, the time up to which object storage holds every
    flushed write (None when it holds them all); ``dirty_bytes`` written
    and not yet flushed; ``cached_bytes`` of the disk the node holds;
    ``durable_bytes`` what the disk holds in the durable tier (its layers'
    chunks and those not yet reclaimed), at most ``durable_limit_bytes``
    (past it a flush, and the sandbox's fsync, fails with ENOSPC);
    ``used_bytes`` what its own blocks take of it; ``refused`` why its last
    flush was refused ("" when it was not)."""

    layer: str
    recovery_point: Optional[datetime]
    dirty_bytes: int
    cached_bytes: int
    durable_bytes: int = 0
    durable_limit_bytes: int = 0
    used_bytes: int = 0
    refused: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Volume":
        """Build from the API's Volume object."""
        return cls(
            layer=str(d.get("layer") or ""),
            recovery_point=parse_time(d.get("recovery_point")),
            dirty_bytes=int(d.get("dirty_bytes") or 0),
            cached_bytes=int(d.get("cached_bytes") or 0),
            durable_bytes=int(d.get("durable_bytes") or 0),
            durable_limit_bytes=int(d.get("durable_limit_bytes") or 0),
            used_bytes=int(d.get("used_bytes") or 0),
            refused=str(d.get("refused") or ""),
        )


@dataclass(frozen=True)
class Restored:
    """How a sandbox came back on another node: from ``snapshot`` (taken
    at ``snapshot_at``), at ``at``; ``lost_seconds`` of work lost (0 for a
    drain), why (``reason``), and the node it left (``from_node``)."""

    snapshot: str
    snapshot_at: Optional[datetime]
    at: Optional[datetime]
    lost_seconds: float
    reason: str
    from_node: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Restored":
        """Build from the API's Restored object."""
        return cls(
            snapshot=str(d.get("snapshot") or ""),
            snapshot_at=parse_time(d.get("snapshot_at")),
            at=parse_time(d.get("at")),
            lost_seconds=float(d.get("lost_seconds") or 0),
            reason=str(d.get("reason") or ""),
            from_node=str(d.get("from") or ""),
        )


@dataclass(frozen=True)
class ExecResult:
    """The outcome of a command.

    Attributes:
        stdout: its standard output as text (invalid UTF-8 as U+FFFD); empty
            for :meth:`Process.wait`, whose output is read with
            :meth:`Process.stream`.
        stderr: its standard error, likewise.
        exit_code: its exit code; 128 + N when killed by signal N (137 when
            its timeout killed it); 127 when the command does not exist.
        duration: how long it ran, in seconds.
        timed_out: whether its own timeout killed it.
        pid: its process id in the sandbox.
        status: how it ended, e.g. ``"exit status 1"``, ``"signal: killed"``.
        truncated: whether output beyond the server's limit (16 MiB a stream)
            was dropped.
    """

    stdout: str
    stderr: str
    exit_code: int
    duration: float
    timed_out: bool = False
    pid: int = 0
    status: str = ""
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """Whether the command exited with 0 before its timeout."""
        return self.exit_code == 0 and not self.timed_out

    def check(self) -> "ExecResult":
        """Return self if the command succeeded; raise
        :class:`~warren.CommandTimeout` if its timeout killed it and
        :class:`~warren.CommandError` for a non-zero exit code."""
        if self.timed_out:
            raise CommandTimeout(f"command timed out after {self.duration:.3f}s ({self.status})")
        if self.exit_code != 0:
            detail = self.stderr.strip()[-500:]
            msg = f"command failed with exit code {self.exit_code}"
            raise CommandError(msg + (f": {detail}" if detail else ""), exit_code=self.exit_code)
        return self

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecResult":
        """Build from the API's ExecResult object."""
        return cls(
            stdout=str(d.get("stdout") or ""),
            stderr=str(d.get("stderr") or ""),
            exit_code=int(d.get("exit_code") or 0),
            duration=float(d.get("duration_ms") or 0) / 1000.0,
            timed_out=bool(d.get("timed_out")),
            pid=int(d.get("pid") or 0),
            status=str(d.get("status") or ""),
            truncated=bool(d.get("truncated")),
        )


@dataclass(frozen=True)
class ExecEvent:
    """One event of a streamed command, in the order it happened.

    ``type`` is ``"start"`` (``pid`` set), ``"stdout"``, ``"stderr"`` or
    ``"pty"`` (a terminal's output; ``data`` holds the exact bytes), or ``"end"`` (``exit_code``,
    ``status``, ``timed_out`` and ``duration`` set). A stream that breaks
    raises instead of yielding an event.
    """

    type: str
    data: bytes = b""
    pid: int = 0
    exit_code: Optional[int] = None
    status: str = ""
    timed_out: bool = False
    duration: float = 0.0
    error: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecEvent":
        """Build from one line of an ndjson event stream."""
        data = d.get("data")
        code = d.get("exit_code")
        return cls(
            type=str(d.get("type", "")),
            data=base64.b64decode(data) if data else b"",
            pid=int(d.get("pid") or 0),
            exit_code=int(code) if code is not None else None,
            status=str(d.get("status") or ""),
            timed_out=bool(d.get("timed_out")),
            duration=float(d.get("duration_ms") or 0) / 1000.0,
            error=str(d.get("error") or ""),
        )


@dataclass(frozen=True)
class ProcessInfo:
    """A process the sandbox's agent started: running, or ended with
    ``exit_code``."""

    pid: int
    cmd: str
    args: List[str]
    running: bool
    exit_code: Optional[int] = None
    tag: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ProcessInfo":
        """Build from the API's Process object."""
        code = d.get("exit_code")
        return cls(
            pid=int(d.get("pid") or 0),
            cmd=str(d.get("cmd") or ""),
            args=[str(a) for a in d.get("args") or []],
            running=bool(d.get("running")),
            exit_code=int(code) if code is not None else None,
            tag=str(d.get("tag") or ""),
        )


@dataclass(frozen=True)
class FileInfo:
    """A file or directory in a sandbox. ``type`` is ``file``, ``dir``,
    ``symlink`` or ``other``; ``mode`` holds the permission bits (e.g.
    ``0o644``)."""

    name: str
    path: str
    type: str
    size: int
    mode: int
    permissions: str
    owner: str
    group: str
    modified_at: Optional[datetime]
    symlink_target: str = ""

    @property
    def is_dir(self) -> bool:
        """Whether this is a directory."""
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        """Whether this is a regular file."""
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileInfo":
        """Build from the API's FileInfo object."""
        return cls(
            name=str(d.get("name") or ""),
            path=str(d.get("path") or ""),
            type=str(d.get("type") or ""),
            size=int(d.get("size") or 0),
            mode=int(d.get("mode") or 0),
            permissions=str(d.get("permissions") or ""),
            owner=str(d.get("owner") or ""),
            group=str(d.get("group") or ""),
            modified_at=parse_time(d.get("modified_at")),
            symlink_target=str(d.get("symlink_target") or ""),
        )


@dataclass(frozen=True)
class Template:
    """A template sandboxes start from: a built-in one (``shared``, no
    version), or a version of one of the tenant's own, ``ref`` being
    NAME@VERSION (docs/TEMPLATES.md)."""

    name: str
    size_bytes: int
    used_bytes: int
    built_at: Optional[datetime]
    ref: str = ""
    version: int = 0
    shared: bool = False
    state: str = ""
    error: str = ""
    source: str = ""
    digest: str = ""
    snapshot: str = ""
    config: Optional[Dict[str, Any]] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Template":
        """Build from the API's Template object."""
        return cls(
            name=str(d.get("name") or ""),
            size_bytes=int(d.get("size_bytes") or 0),
            used_bytes=int(d.get("used_bytes") or 0),
            built_at=parse_time(d.get("built_at")),
            ref=str(d.get("ref") or d.get("name") or ""),
            version=int(d.get("version") or 0),
            shared=bool(d.get("shared")),
            state=str(d.get("state") or ""),
            error=str(d.get("error") or ""),
            source=str(d.get("source") or ""),
            digest=str(d.get("digest") or ""),
            snapshot=str(d.get("snapshot") or ""),
            config=dict(d["config"]) if isinstance(d.get("config"), Mapping) else None,
        )


@dataclass(frozen=True)
class Secret:
    """One of your secrets as the API shows it: never its value, which is
    write-only (:meth:`Client.set_secret`).

    Attributes:
        id: ``sec_`` and 20 random characters; every call that takes a
            name takes it too.
        name: in lower case, as the server stores it.
        version: the values it has had: 1 when created, one more at each
            :meth:`Client.set_secret`.
        metadata: your own labels.
        created_at, updated_at: when it was created, and its latest value set.
    """

    id: str
    name: str
    version: int
    metadata: Dict[str, str] = field(default_factory=dict)
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Secret":
        """Build from the API's Secret object."""
        return cls(
            id=str(d.get("id") or ""),
            name=str(d.get("name") or ""),
            version=int(d.get("version") or 0),
            metadata=_str_map(d.get("metadata")),
            created_at=parse_time(d.get("created_at")),
            updated_at=parse_time(d.get("updated_at")),
        )


@dataclass(frozen=True)
class RuntimeInfo:
    """A runtime a node offers, and whether it can run sandboxes now."""

    name: str
    isolation: str
    available: bool
    reason: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RuntimeInfo":
        """Build from the API's RuntimeInfo object."""
        return cls(
            name=str(d.get("name") or ""),
            isolation=str(d.get("isolation") or ""),
            available=bool(d.get("available")),
            reason=str(d.get("reason") or ""),
        )


@dataclass(frozen=True)
class NodeInfo:
    """What :meth:`Client.info` reports about the node. ``blob_store`` is
    where it stores snapshots (never with credentials)."""

    version: str
    kernel: str
    runtimes: List[RuntimeInfo]
    clone_mode: str
    cgroup_version: int
    sandboxes: int
    blob_store: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NodeInfo":
        """Build from the API's NodeInfo object."""
        return cls(
            version=str(d.get("version") or ""),
            kernel=str(d.get("kernel") or ""),
            runtimes=[RuntimeInfo.from_json(r) for r in d.get("runtimes") or []],
            clone_mode=str(d.get("clone_mode") or ""),
            cgroup_version=int(d.get("cgroup_version") or 0),
            sandboxes=int(d.get("sandboxes") or 0),
            blob_store=str(d.get("blob_store") or ""),
        )


@dataclass(frozen=True)
class GCResult:
    """What a garbage collection of the blob store (:func:`warren.gc`)
    removed and kept."""

    manifests_deleted: int
    chunks_deleted: int
    bytes_freed: int
    chunks_kept: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GCResult":
        """Build from the API's GCResult object."""
        return cls(
            manifests_deleted=int(d.get("manifests_deleted") or 0),
            chunks_deleted=int(d.get("chunks_deleted") or 0),
            bytes_freed=int(d.get("bytes_freed") or 0),
            chunks_kept=int(d.get("chunks_kept") or 0),
        )


@dataclass(frozen=True)
class Preview:
    """How a sandbox's ports are reached on the server's preview host
    names, ``PORT-ID.<preview domain>`` (:meth:`Sandbox.preview`).

    Attributes:
        public: anyone may reach the ports on the preview hosts; otherwise
            a request needs the token.
        token: the sandbox's access token: header ``X-Warren-Access-Token``,
            query parameter ``warren_token`` (a browser is redirected
            without it and keeps a cookie), or the ``warren_token`` cookie.
        url: the preview URL with ``{port}`` in place of the port, e.g.
            ``https://{port}-sb-….preview.example.com/``; None when the
            server has no preview domain.
    """

    public: bool
    token: str
    url: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Preview":
        """Build from the API's Preview object."""
        url = d.get("url")
        return cls(public=bool(d.get("public")), token=str(d.get("token") or ""),
                   url=str(url) if url else None)

    def port_url(self, port: int, *, with_token: bool = False) -> Optional[str]:
        """The preview URL of one port, with ``?warren_token=…`` when
        with_token is set and the preview is private; None without a
        preview domain."""
        _check_port(port)
        if self.url is None:
            return None
        u = self.url.replace("{port}", str(port))
        if with_token and not self.public:
            u += "?" + urllib.parse.urlencode({"warren_token": self.token})
        return u


def _check_port(port: int) -> None:
    """Refuse what is not a TCP port number."""
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be an int, not {type(port).__name__}")
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be between 1 and 65535, not {port}")


@dataclass(frozen=True)
class PoolNode:
    """One node's share of a warm pool, as it last reported it."""

    node: str
    target: int
    ready: int
    hits: int
    misses: int
    reported_at: Optional[datetime]
    error: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PoolNode":
        """Build from the API's PoolNode object."""
        return cls(
            node=str(d.get("node") or ""),
            target=int(d.get("target") or 0),
            ready=int(d.get("ready") or 0),
            hits=int(d.get("hits") or 0),
            misses=int(d.get("misses") or 0),
            reported_at=parse_time(d.get("reported_at")),
            error=str(d.get("error") or ""),
        )


@dataclass(frozen=True)
class Pool:
    """A warm pool (:meth:`Client.set_pool`): sandboxes of one template and
    runtime kept booted ahead of demand, which creates of the same
    template, runtime and resources take instead of booting.

    Attributes:
        min, max: members kept ready, and the most misses grow the pool to.
        target: members the nodes aim to keep ready now; ready: those ready.
        hits, misses: creates that took a member, and that matched the pool
            but found it empty, since the pool was set.
        nodes: each node's share.
    """

    template: str
    runtime: str
    min: int
    max: int
    cpus: float
    memory_mb: int
    pids: int
    disk_mb: int
    target: int
    ready: int
    hits: int
    misses: int
    nodes: Tuple[PoolNode, ...]
    updated_at: Optional[datetime]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Pool":
        """Build from the API's Pool object."""
        return cls(
            template=str(d.get("template") or ""),
            runtime=str(d.get("runtime") or ""),
            min=int(d.get("min") or 0),
            max=int(d.get("max") or 0),
            cpus=float(d.get("cpus") or 0),
            memory_mb=int(d.get("memory_mb") or 0),
            pids=int(d.get("pids") or 0),
            disk_mb=int(d.get("disk_mb") or 0),
            target=int(d.get("target") or 0),
            ready=int(d.get("ready") or 0),
            hits=int(d.get("hits") or 0),
            misses=int(d.get("misses") or 0),
            nodes=tuple(PoolNode.from_json(n) for n in d.get("nodes") or ()),
            updated_at=parse_time(d.get("updated_at")),
        )
