"""HTTP transport of the SDK: a small pool of keep-alive connections, one
request at a time on each, and the retry policy.

Standard library only (http.client). A connection is taken from the pool for
one request and given back once its answer has been read to the end; a
connection whose answer was abandoned half-read is closed instead. The pool
is safe for concurrent use by many threads, and drops its connections in a
child process after fork.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import select
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .errors import NetworkError, RequestTimeout, WarrenError, error_from_response

# Retry classes: when a failed call may be sent again.
NEVER = 0  # effects that must not happen twice, or a body that cannot be replayed
REFUSED = 1  # repeated only when the connection was refused: nothing was sent
IDEMPOTENT = 2  # repeating changes nothing: also after a broken connection, 502, 503

Body = Union[bytes, Iterable[bytes], None]

_ERROR_BODY_LIMIT = 64 << 10


class Answer:
    """A complete answer: its status, headers and body."""

    __slots__ = ("status", "headers", "data")

    def __init__(self, status: int, headers: http.client.HTTPMessage, data: bytes) -> None:
        self.status = status
        self.headers = headers
        self.data = data

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.data.decode("utf-8"))


class RawStream:
    """An answer whose body is read as it arrives. Close it when done: a body
    read to its end gives the connection back to the pool, anything else
    closes the connection (which tells the server that the caller left)."""

    def __init__(self, pool: "_Pool", conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._pool = pool
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    def readline(self) -> bytes:
        """The next line of the body with its newline; b"" at the end."""
        try:
            return self._resp.readline()
        except socket.timeout as e:
            raise RequestTimeout(f"reading the answer timed out: {e}") from e
        except (OSError, http.client.HTTPException) as e:
            raise NetworkError(f"connection broke while reading the answer: {e}") from e

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes of the body (all that is left when n < 0); b"" at the
        end."""
        try:
            if n < 0:
                return self._resp.read()
            return self._resp.read1(n) if n else b""
        except socket.timeout as e:
            raise RequestTimeout(f"reading the answer timed out: {e}") from e
        except (OSError, http.client.HTTPException) as e:
            raise NetworkError(f"connection broke while reading the answer: {e}") from e

    def close(self) -> None:
        """Release the connection: back to the pool if the body was read to
        its end, closed otherwise. Idempotent."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._resp.isclosed() and not self._resp.will_close:
            self._pool.release(conn)
        else:
            self._resp.close()
            conn.close()


class _Pool:
    """Idle keep-alive connections to one server."""

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        connect_timeout: float,
        max_idle: int,
        ssl_context: Optional[ssl.SSLContext],
    ) -> None:
        self._scheme = scheme
        self._host = host
        self._port = port
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._ssl_context = ssl_context
        self._lock = threading.Lock()
        self._idle: List[http.client.HTTPConnection] = []
        self._pid = os.getpid()

    def _after_fork(self) -> None:
        # The parent's sockets must not be shared with a child: forget them
        # (and a lock another thread may have held at the fork).
        if self._pid != os.getpid():
            self._lock = threading.Lock()
            self._idle = []
            self._pid = os.getpid()

    def acquire(self) -> Tuple[http.client.HTTPConnection, bool]:
        """An idle connection that still looks alive, or a new unconnected
        one; and whether it was reused."""
        self._after_fork()
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if _alive(conn):
                return conn, True
            conn.close()
        if self._scheme == "https":
            ctx = self._ssl_context or ssl.create_default_context()
            new: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._connect_timeout, context=ctx, blocksize=64 << 10
            )
        else:
            new = http.client.HTTPConnection(
                self._host, self._port, timeout=self._connect_timeout, blocksize=64 << 10
            )
        return new, False

    def release(self, conn: http.client.HTTPConnection) -> None:
        """Keep conn for the next request, or close it when the pool is
        full."""
        self._after_fork()
        with self._lock:
            if conn.sock is not None and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _alive(conn: http.client.HTTPConnection) -> bool:
    """Report whether an idle connection can carry a request: an idle socket
    that is readable has been closed by the server (or holds garbage)."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN)
            return not p.poll(0)
        readable, _, _ = select.select([sock], [], [], 0)
        return not readable
    except (OSError, ValueError):
        return False


def _retryable(kind: int, status: int, refused: bool, timed_out: bool) -> bool:
    """Report whether a call of retry class kind may be repeated after an
    attempt that got the HTTP status (0 when none came back)."""
    if kind == NEVER:
        return False
    if status in (502, 503):
        return kind == IDEMPOTENT
    if status:
        return False
    if timed_out:
        return False
    if refused:
        return True
    return kind == IDEMPOTENT


class Transport:
    """Sends API calls to one server, with its key, retrying as each call's
    class allows.

    Args:
        base_url: ``http(s)://host[:port][/prefix]``.
        api_key: sent as ``Authorization: Bearer``; empty sends none.
        connect_timeout: seconds to establish a connection.
        timeout: socket timeout in seconds of ordinary calls (a call may ask
            for another, None for none: streams and commands can be long).
        attempts: how many times a call that is safe to repeat is tried.
        backoff: delay in seconds before the first retry; it doubles each
            time, up to 16 times itself, with jitter.
        max_idle: idle connections kept for reuse.
        ssl_context: for https, instead of the default context.
        user_agent: the User-Agent header.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        connect_timeout: float,
        timeout: Optional[float],
        attempts: int,
        backoff: float,
        max_idle: int,
        ssl_context: Optional[ssl.SSLContext],
        user_agent: str,
    ) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"bad URL {base_url!r}: want http(s)://host[:port]")
        self.base_url = base_url.rstrip("/")
        self.host = u.hostname
        self._prefix = u.path.rstrip("/")
        port = u.port or (443 if u.scheme == "https" else 80)
        self._pool = _Pool(u.scheme, u.hostname, port, connect_timeout, max_idle, ssl_context)
        self._key = api_key
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = max(0.0, backoff)
        self._user_agent = user_agent

    def close(self) -> None:
        """Close the idle connections; later calls open new ones."""
        self._pool.close()

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number attempt (1 for the
        first)."""
        d = self.backoff * (1 << min(attempt - 1, 4))
        return d / 2 + random.uniform(0, d / 2)

    def url(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        """The request target of path (already escaped) and query."""
        target = self._prefix + path
        if query:
            q = {k: _query_value(v) for k, v in query.items() if v is not None}
            if q:
                target += "?" + urllib.parse.urlencode(q)
        return target

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        body: Body = None,
        retry: int = NEVER,
        gone_is_done: bool = False,
        timeout: Union[float, None, str] = "default",
        accept: str = "application/json",
        idempotency_key: Optional[str] = None,
    ) -> Answer:
        """Send a call and return its complete 2xx answer; an error answer
        is raised as its WarrenError.

        gone_is_done makes a 404 a success after an attempt whose outcome is
        unknown (it did what the call asked, as a repeated DELETE finds).
        idempotency_key is sent with every attempt: the server answers a
        repeat with the first attempt's answer."""
        sent = self._send(method, path, query, json_body, body, retry, gone_is_done, timeout, accept, idempotency_key)
        if sent is None:
            return Answer(204, http.client.HTTPMessage(), b"")
        conn, resp = sent
        try:
            data = resp.read()
        except socket.timeout as e:
            conn.close()
            raise RequestTimeout(f"{method} {path}: reading the answer timed out") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise NetworkError(f"{method} {path}: connection broke while reading the answer: {e}") from e
        self._finish(conn, resp)
        return Answer(resp.status, resp.headers, data)

    def stream(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        retry: int = NEVER,
        timeout: Union[float, None, str] = None,
        accept: str = "application/x-ndjson",
    ) -> RawStream:
        """Send a call and return its 2xx answer as a stream to read as it
        arrives; an error answer is raised as its WarrenError."""
        sent = self._send(method, path, query, json_body, None, retry, False, timeout, accept, None)
        assert sent is not None  # only gone_is_done calls answer None
        return RawStream(self._pool, sent[0], sent[1])

    def _finish(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        """Give conn back to the pool if its answer was read to the end and
        the server keeps the connection open; close it otherwise."""
        if resp.isclosed() and not resp.will_close and conn.sock is not None:
            self._pool.release(conn)
        else:
            resp.close()
            conn.close()

    def _send(
        self,
        method: str,
        path: str,
        query: Optional[Mapping[str, Any]],
        json_body: Any,
        body: Body,
        retry: int,
        gone_is_done: bool,
        timeout: Union[float, None, str],
        accept: str,
        idempotency_key: Optional[str],
    ) -> Optional[Tuple[http.client.HTTPConnection, http.client.HTTPResponse]]:
        """Send a call, repeating it as retry allows; the connection and
        response of a 2xx answer, or None for a 404 that gone_is_done makes a
        success."""
        read_timeout: Optional[float] = self.timeout if isinstance(timeout, str) else timeout
        target = self.url(path, query)
        headers: Dict[str, str] = {"User-Agent": self._user_agent, "Accept": accept}
        if self._key:
            headers["Authorization"] = "Bearer " + self._key
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        payload: Body = None
        if json_body is not None:
            payload = json.dumps(json_body, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        elif body is not None:
            payload = body
            headers["Content-Type"] = "application/octet-stream"
        # A body that is a stream cannot be sent twice.
        tries = self.attempts if retry != NEVER and (body is None or isinstance(body, bytes)) else 1
        unknown = False  # an earlier attempt may have reached the server
        attempt = 0
        while True:
            attempt += 1
            status = 0
            refused = timed_out = False
            try:
                conn, resp = self._attempt(method, target, payload, headers, read_timeout)
            except ConnectionRefusedError as e:
                refused = True
                err: WarrenError = NetworkError(f"{method} {path}: cannot connect to {self.base_url}: {e}")
                cause: Optional[BaseException] = e
            except socket.timeout as e:
                timed_out = True
                err = RequestTimeout(f"{method} {path}: no answer from {self.base_url} in time ({e})")
                cause = e
            except (OSError, http.client.HTTPException) as e:
                err = NetworkError(f"{method} {path}: connection to {self.base_url} failed: {e!r}")
                cause = e
            else:
                status = resp.status
                if 200 <= status < 300:
                    return conn, resp
                rid = resp.getheader("X-Request-Id")
                try:
                    data = resp.read(_ERROR_BODY_LIMIT)
                except (OSError, http.client.HTTPException):
                    data = b""
                # A body longer than the limit was not read to its end, and
                # _finish closes its connection.
                self._finish(conn, resp)
                if status == 404 and gone_is_done and unknown:
                    return None
                err = error_from_response(status, data, rid)
                cause = None
            if attempt >= tries or not _retryable(retry, status, refused, timed_out):
                if cause is not None:
                    raise err from cause
                raise err
            unknown = unknown or (status == 0 and not refused)
            time.sleep(self.delay(attempt))

    def _attempt(
        self,
        method: str,
        target: str,
        payload: Body,
        headers: Dict[str, str],
        read_timeout: Optional[float],
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn, _ = self._pool.acquire()
        try:
            if conn.sock is None:
                conn.connect()
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # type: ignore[attr-defined]
            sock = conn.sock
            assert sock is not None
            sock.settimeout(read_timeout)
            try:
                conn.request(method, target, body=payload, headers=headers)
            except (BrokenPipeError, ConnectionResetError) as send_err:
                # The server may have answered early (an error, without
                # reading the body) and closed: that answer says why.
                try:
                    return conn, conn.getresponse()
                except (OSError, http.client.HTTPException):
                    raise send_err from None
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def path_of(*segments: str) -> str:
    """An escaped URL path from its segments: path_of("v1", "sandboxes",
    id) is "/v1/sandboxes/<id escaped>"."""
    return "".join("/" + urllib.parse.quote(s, safe="") for s in segments)
