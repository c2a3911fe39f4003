"""The connection to a warren server: :class:`Client`."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import ssl
import threading
import urllib.parse
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Union

from ._pages import MAX_LIST_LIMIT, fetch_page, iterate
from ._transport import IDEMPOTENT, NEVER, REFUSED, Transport, path_of
from .errors import BuildFailedError, ConfigurationError, StreamBrokenError, WarrenError
from .events import Event, follow_events
from .models import GCResult, NodeInfo, Pool, Secret, Template

if TYPE_CHECKING:
    from .snapshots import Snapshot

__all__ = [
    "Client",
    "default_client",
    "set_default_client",
    "DEFAULT_URL",
    "DEFAULT_DATA_DIR",
    "ENV_URL",
    "ENV_API_KEY",
    "ENV_DATA_DIR",
]

__version__ = "0.1.0"

#: Environment variable holding the server's base URL.
ENV_URL = "WARREN_URL"
#: Environment variable holding the API key.
ENV_API_KEY = "WARREN_API_KEY"
#: Environment variable naming the local server's data directory.
ENV_DATA_DIR = "WARREN_DATA_DIR"
#: The URL used when neither an argument nor WARREN_URL gives one.
DEFAULT_URL = "http://127.0.0.1:7777"
#: The local server's data directory when WARREN_DATA_DIR is unset.
DEFAULT_DATA_DIR = "/var/lib/warren"
_ADMIN_KEY_FILE = "admin.key"


def _loopback(host: str) -> bool:
    """Report whether host names this machine's loopback interface."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _resolve_key(url: str, api_key: Optional[str]) -> str:
    """The API key: the argument, else $WARREN_API_KEY, else - for a server
    on a loopback address only - the local server's admin key file."""
    if api_key is not None:
        return api_key
    key = os.environ.get(ENV_API_KEY, "")
    if key:
        return key
    data_dir = os.environ.get(ENV_DATA_DIR) or DEFAULT_DATA_DIR
    path = os.path.join(data_dir, _ADMIN_KEY_FILE)
    host = urllib.parse.urlsplit(url).hostname or ""
    if not _loopback(host):
        raise ConfigurationError(
            f"no API key: pass api_key= or set {ENV_API_KEY} (the admin key in {path} "
            f"is used only for a server on this machine, not {host})"
        )
    try:
        with open(path, encoding="utf-8") as f:
            key = f.read().strip()
    except FileNotFoundError:
        raise ConfigurationError(
            f"no API key: pass api_key= or set {ENV_API_KEY}, or run where the server's "
            f"admin key {path} exists (set {ENV_DATA_DIR} for another data directory)"
        ) from None
    except OSError as e:
        raise ConfigurationError(f"no API key: {ENV_API_KEY} is unset and {path}: {e}") from e
    if not key:
        raise ConfigurationError(f"no API key: {ENV_API_KEY} is unset and {path} is empty")
    return key


class Client:
    """A connection to one warren server, shared by the sandboxes made
    through it.

    Safe to use from many threads at once: calls reuse keep-alive
    connections from a small pool. Calls that are safe to repeat (reads,
    deleting a sandbox or a snapshot) are retried on a refused or broken
    connection and on 502/503, with a bounded exponential backoff; calls with
    effects (create, exec, stdin, file upload, snapshot, restore) are sent
    once.

    Args:
        url: the server's base URL; default $WARREN_URL, else
            ``http://127.0.0.1:7777``.
        api_key: the API key; default $WARREN_API_KEY, else, only when the
            URL is a loopback address, the local server's admin key
            (``admin.key`` in $WARREN_DATA_DIR, default ``/var/lib/warren``).
        timeout: socket timeout in seconds of ordinary calls (default 120).
            Commands and streams are bounded by their own timeouts instead.
        connect_timeout: seconds to establish a connection (default 10).
        retries: attempts of a call that is safe to repeat, the first
            included (default 5; 1 disables retries).
        backoff: seconds before the first retry (default 0.1); it doubles
            after each attempt, up to 16 times itself, with jitter.
        max_idle_connections: idle connections kept for reuse (default 32).
        ssl_context: the SSL context for an https URL.

    Raises:
        ConfigurationError: the URL is not http(s), or no API key is found.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: Optional[float] = 120.0,
        connect_timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.1,
        max_idle_connections: int = 32,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        url = url or os.environ.get(ENV_URL) or DEFAULT_URL
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ConfigurationError(f"bad server URL {url!r}: want a URL like {DEFAULT_URL}")
        self.url: str = url.rstrip("/")
        key = _resolve_key(self.url, api_key)
        try:
            self._transport = Transport(
                self.url,
                key,
                connect_timeout=connect_timeout,
                timeout=timeout,
                attempts=retries,
                backoff=backoff,
                max_idle=max_idle_connections,
                ssl_context=ssl_context,
                user_agent=f"warren-python/{__version__}",
            )
        except ValueError as e:  # e.g. a port out of range
            raise ConfigurationError(f"bad server URL {url!r}: {e}") from None
        # A client dropped without close() still closes its idle sockets.
        weakref.finalize(self, self._transport.close)

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connections. The client stays usable: later calls
        open new connections."""
        self._transport.close()

    @property
    def transport(self) -> Transport:
        """The HTTP transport (for the SDK's own modules)."""
        return self._transport

    def health(self) -> bool:
        """Report whether the server answers ``/healthz`` with ok. Needs no
        key, makes one attempt, and returns False rather than raising when
        the server cannot be reached or answers otherwise."""
        t = self._transport
        try:
            answer = t.request("GET", "/healthz", retry=NEVER, timeout=min(t.timeout or 10.0, 10.0))
            return bool(answer.json().get("status") == "ok")
        except (WarrenError, ValueError, AttributeError):
            return False

    def info(self) -> NodeInfo:
        """Describe the node: version, kernel, runtimes and their isolation,
        how disks are cloned, cgroup version, running sandboxes."""
        return NodeInfo.from_json(self._get("/v1/info"))

    def templates(self) -> List[Template]:
        """The built-in templates and the newest version of each of yours, by
        name. Follows every page."""
        return list(iterate(lambda token: fetch_page(
            self._transport, "/v1/templates", "templates", Template.from_json, limit=MAX_LIST_LIMIT, page_token=token,
        )))

    def openapi(self) -> Dict[str, Any]:
        """The server's OpenAPI 3.1 document of the HTTP API."""
        doc = self._get("/openapi.json")
        if not isinstance(doc, dict):
            raise WarrenError("the OpenAPI document is not a JSON object", code="bad_answer")
        return doc

    def build_template(self, name: str, on_progress: Optional[Callable[[str], None]] = None) -> Template:
        """Build (or rebuild) the built-in template ``name`` from its recipe
        and return it; needs the admin key. Each line of progress is passed
        to on_progress as it comes. A first build can take minutes. Never
        retried.

        Raises:
            ForbiddenError: the key is not the admin key.
            NotFoundError: no recipe has that name.
            WarrenError: the build failed (its message says why).
        """
        return self._build("POST", path_of("v1", "templates", name, "build"), None, on_progress, name)

    def create_template(
        self,
        name: str,
        *,
        spec: Optional[str] = None,
        dockerfile: bool = False,
        context: Optional[bytes] = None,
        from_snapshot: Optional[str] = None,
        from_image: Optional[str] = None,
        insecure: bool = False,
        config: Optional[Mapping[str, Any]] = None,
        background: bool = False,
        on_progress: Optional[Callable[[str], None]] = None,
    ) -> Template:
        """Make a new version of your template ``name`` from exactly one of
        a build ``spec`` (warren's YAML, or a Dockerfile with
        ``dockerfile=True``; ``context`` is a tar of the files its copy
        steps read), a durable snapshot (``from_snapshot``) or an OCI image
        the server pulls (``from_image``). ``config`` (env, workdir, user,
        start, ready, ready_timeout_seconds) is for a snapshot or an image.
        Returns the version once built, each progress line passed to
        on_progress as "[step] line"; with ``background`` at once, building
        (follow it with :meth:`template`). Never retried.

        Raises:
            BadRequestError: a bad spec (its line named) or request.
            BuildFailedError: a step failed; the message names it and has
                its output.
        """
        body: Dict[str, Any] = {"name": name}
        if spec is not None:
            body["spec"] = spec
            if dockerfile:
                body["spec_format"] = "dockerfile"
        if context is not None:
            body["context"] = base64.b64encode(context).decode("ascii")
        if from_snapshot is not None:
            body["from_snapshot"] = from_snapshot
        if from_image is not None:
            body["from_image"] = {"ref": from_image, "insecure": insecure}
        if config is not None:
            body["config"] = dict(config)
        if background:
            body["background"] = True
            answer = self._transport.request("POST", "/v1/templates", json_body=body, retry=NEVER)
            return Template.from_json(answer.json())
        return self._build("POST", "/v1/templates", body, on_progress, name)

    def _build(self, method: str, path: str, body: Any, on_progress: Optional[Callable[[str], None]], name: str) -> Template:
        """Read a build's stream of events to its template or its error."""
        stream = self._transport.stream(method, path, json_body=body, retry=NEVER)
        try:
            while True:
                line = stream.readline()
                if not line:
                    raise StreamBrokenError(f"build of template {name}: the stream ended without a result")
                if not line.strip():
                    continue
                ev = json.loads(line.decode("utf-8"))
                if ev.get("progress") is not None and on_progress is not None:
                    step = ev.get("step")
                    on_progress(f"[{step}] {ev['progress']}" if step else str(ev["progress"]))
                if ev.get("error"):
                    failed = Template.from_json(ev["template"]) if ev.get("template") else None
                    raise BuildFailedError(f"build of template {name}: {ev['error']}", template=failed)
                if ev.get("template"):
                    return Template.from_json(ev["template"])
        finally:
            stream.close()

    def template(self, ref: str) -> Template:
        """A built-in template, or a version of yours: ``NAME`` (the
        newest) or ``NAME@VERSION``.

        Raises:
            NotFoundError: there is none (or it is another tenant's).
        """
        return Template.from_json(self._get(path_of("v1", "templates", ref)))

    def template_versions(self, name: str) -> List[Template]:
        """The versions of your template ``name``, newest first."""
        d = self._get(path_of("v1", "templates", name, "versions"))
        return [Template.from_json(t) for t in d.get("templates") or []]

    def share_template(self, ref: str, shared: bool = True) -> Template:
        """Publish the admin's version ``NAME@VERSION`` to every tenant (or
        withdraw it with ``shared=False``); needs the admin key."""
        answer = self._transport.request("PUT", path_of("v1", "templates", ref, "shared"),
                                         json_body={"shared": shared}, retry=IDEMPOTENT)
        return Template.from_json(answer.json())

    def delete_template(self, ref: str) -> None:
        """Delete ``NAME@VERSION``, or every version of ``NAME``.

        Raises:
            ConflictError: a live sandbox started from it, or it is building.
        """
        self._transport.request("DELETE", path_of("v1", "templates", ref), retry=IDEMPOTENT, gone_is_done=True)

    def get_snapshot(self, snapshot_id: str) -> "Snapshot":
        """The snapshot with this id; see :func:`warren.get_snapshot`.

        Raises:
            NotFoundError: there is none (deleted, or another tenant's).
        """
        from .snapshots import get_snapshot

        return get_snapshot(snapshot_id, client=self)

    def list_snapshots(self, *, state: Union[str, List[str], None] = None) -> List["Snapshot"]:
        """Your snapshots on the node, oldest first; see
        :func:`warren.list_snapshots`."""
        from .snapshots import list_snapshots

        return list_snapshots(state=state, client=self)

    def delete_snapshot(self, snapshot: Union["Snapshot", str]) -> None:
        """Delete a snapshot (or the snapshot with this id); see
        :func:`warren.delete_snapshot`.

        Raises:
            NotFoundError: there is no such snapshot (any more).
        """
        from .snapshots import delete_snapshot

        delete_snapshot(snapshot, client=self)

    def gc(self, grace_seconds: Optional[float] = None) -> GCResult:
        """Collect the snapshot data in the blob store that nothing needs
        any more (admin key only); see :func:`warren.gc`.

        Raises:
            ForbiddenError: the key is not the admin key.
        """
        from .snapshots import gc

        return gc(grace_seconds, client=self)

    def pools(self) -> List[Pool]:
        """The warm pools, with their targets, ready members, hits and
        misses (admin key only).

        Raises:
            ForbiddenError: the key is not the admin key.
        """
        return [Pool.from_json(p) for p in self._get("/v1/pools").get("pools") or []]

    def set_pool(
        self,
        template: str,
        *,
        min: int,
        max: Optional[int] = None,
        runtime: Optional[str] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        disk_mb: Optional[int] = None,
    ) -> Pool:
        """Keep ``min`` sandboxes of ``template`` booted ahead of demand,
        grown toward ``max`` (default ``min``) while creates find the pool
        empty; replaces the pool of that template and runtime, members and
        all (admin key only). A create of the same template, runtime and
        resources (each after the server's defaults) takes a member instead
        of booting.

        Raises:
            ForbiddenError: the key is not the admin key.
            NotFoundError: there is no such template.
            BadRequestError: the numbers are out of range.
            ConflictError: the node could never hold its share.
        """
        spec: Dict[str, Any] = {"min": min}
        for name, value in (("max", max), ("runtime", runtime), ("cpus", cpus),
                            ("memory_mb", memory_mb), ("pids", pids), ("disk_mb", disk_mb)):
            if value is not None:
                spec[name] = value
        answer = self._transport.request("PUT", path_of("v1", "pools", template), json_body=spec, retry=IDEMPOTENT)
        return Pool.from_json(answer.json())

    def delete_pool(self, template: str, runtime: Optional[str] = None) -> None:
        """Remove the warm pool of ``template`` and ``runtime`` (default:
        what a create picks); its members go (admin key only).

        Raises:
            NotFoundError: there is no such pool.
        """
        query = {"runtime": runtime} if runtime else None
        self._transport.request("DELETE", path_of("v1", "pools", template), query=query, retry=IDEMPOTENT)

    def set_secret(self, name: str, value: str, *, metadata: Optional[Mapping[str, str]] = None) -> Secret:
        """Create your secret ``name``, or give it a new version with this
        value, and return it without the value: no call ever returns one.
        Egress rules name it as ``${secrets.NAME}``, and the node puts the
        value in the sandbox's requests as they leave it
        (:class:`~warren.NetworkRule`; docs/NETWORK.md, "Secrets at
        egress").

        Names are 1 to 128 letters, digits, ``.``, ``_`` and ``-``,
        starting with a letter or a digit, stored in lower case. The value
        is 1 byte to 16 KiB of text without CR, LF or NUL (it is sent in
        HTTP headers). ``metadata``, when given, replaces the secret's
        (at most 32 entries); left out, an update keeps it. Repeated only
        when the connection was refused: each call that reaches the server
        counts a version.

        Raises:
            BadRequestError: a bad name, value or metadata (the message
                never quotes the value).
            NotFoundError: the server keeps no secrets.
            WarrenError: 429 ``too_many_requests`` past 1000 secrets.
        """
        if not isinstance(value, str):
            raise TypeError(f"a secret's value must be a str, not {type(value).__name__}")
        body: Dict[str, Any] = {"value": value}
        path = _secret_path(name)
        if metadata is not None:
            body["metadata"] = {str(k): str(v) for k, v in metadata.items()}
        answer = self._transport.request("PUT", path, json_body=body, retry=REFUSED)
        return Secret.from_json(answer.json())

    def list_secrets(self) -> List[Secret]:
        """Your secrets (at most 1000), in name order, without values."""
        return [Secret.from_json(x) for x in self._get("/v1/secrets").get("secrets") or []]

    def get_secret(self, ref: str) -> Secret:
        """Your secret by name (any case) or ID, without its value.

        Raises:
            NotFoundError: there is none.
        """
        return Secret.from_json(self._get(_secret_path(ref)))

    def delete_secret(self, ref: str) -> None:
        """Delete your secret (by name or ID), every version of it.
        Sandboxes whose rules resolved it keep the value they have; rules
        set later that name it are refused.

        Raises:
            NotFoundError: there is none.
        """
        self._transport.request("DELETE", _secret_path(ref), retry=IDEMPOTENT, gone_is_done=True)

    def events(
        self,
        *,
        sandbox: Optional[str] = None,
        snapshot: Optional[str] = None,
        kinds: Union[str, List[str], None] = None,
        after: Optional[int] = None,
        all_tenants: bool = False,
    ) -> Iterator[Event]:
        """Follow what happens to the caller's sandboxes and snapshots
        (docs/API.md, "Events"): yield each :class:`~warren.Event` as it
        happens, in order, for as long as the caller iterates. A cut
        connection is opened again, with backoff, after the last event
        yielded, so none is lost or repeated; when the server no longer holds
        the events after it (older than its replay window), an event of kind
        ``events.lost`` comes first.

        Args:
            sandbox, snapshot: only the events about this one.
            kinds: only these kinds (a list, or comma-separated), or families
                (``sandbox``, ``snapshot``, ``node``).
            after: start after this event ID (0: every event the server still
                holds) instead of with the next event.
            all_tenants: every tenant's events and the fleet's nodes' (admin
                key only).

        Raises:
            BadRequestError: an unknown kind or a bad ID.
            ForbiddenError: ``all_tenants`` without an admin key.
        """
        return follow_events(self._transport, sandbox=sandbox, snapshot=snapshot, kinds=kinds, after=after,
                             all_tenants=all_tenants)

    def _get(self, path: str, query: Optional[Dict[str, Any]] = None) -> Any:
        """GET a JSON document, retried as reads are."""
        return self._transport.request("GET", path, query=query, retry=IDEMPOTENT).json()


def _secret_path(ref: str) -> str:
    """The path of a secret's routes; an empty name is refused before
    anything is sent (it would name the list)."""
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"a secret's name must be a non-empty str, not {ref!r}")
    return path_of("v1", "secrets", ref)


_default_lock = threading.Lock()
_default: Optional[Client] = None


def default_client() -> Client:
    """The client used when none is given: made on first use from
    $WARREN_URL and $WARREN_API_KEY (see :class:`Client`), then shared."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def set_default_client(client: Optional[Client]) -> None:
    """Make client the one used when none is given; None makes the next use
    build a new one from the environment."""
    global _default
    with _default_lock:
        _default = client
