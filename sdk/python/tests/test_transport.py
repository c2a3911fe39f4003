"""The SDK's HTTP behaviour against a local stub server: retries only for
calls safe to repeat, error mapping, keep-alive reuse, streamed uploads and
key discovery. Needs no warren daemon."""

from __future__ import annotations

from datetime import datetime, timezone
import asyncio
import dataclasses
import http.server
import io
import json
import urllib.parse
import os
import socket
import tempfile
import threading
import time
import unittest
from typing import Callable, List, Optional, Tuple
from unittest import mock

import warren
from warren import Client, Sandbox

SANDBOX = {
    "id": "sb-stub1",
    "template": "default",
    "runtime": "container",
    "isolation": "container (shared host kernel)",
    "state": "running",
    "cpus": 1,
    "memory_mb": 512,
    "pids": 256,
    "disk_mb": 4096,
    "created_at": "2026-11-29T10:00:00.123456789Z",
    "expires_at": "2026-11-29T10:15:00Z",
}

SNAPSHOT = {
    "id": "sn-stub1",
    "sandbox_id": "sb-stub1",
    "parent": "sn-stub0",
    "template": "default",
    "state": "durable",
    "disk_bytes": 4294967296,
    "changed_bytes": 126976,
    "stored_bytes": 6123,
    "created_at": "2026-11-29T15:54:39.754090123Z",
    "durable_at": "2026-11-29T15:54:43.518258Z",
    "ack_ms": 34.5,
    "upload_ms": 147.66,
}
PENDING = dict(SNAPSHOT, state="pending", changed_bytes=0, stored_bytes=0, durable_at=None, upload_ms=None)

# A reply: (status, JSON-able body or raw bytes), or None to drop the
# connection without answering.
Reply = Optional[Tuple[int, object]]


class Seen:
    """A request the stub received."""

    def __init__(self, method: str, path: str, headers: dict, body: bytes, peer: Tuple[str, int]) -> None:
        self.method, self.path, self.headers, self.body, self.peer = method, path, headers, body, peer


class Stub:
    """A local HTTP/1.1 server that answers with a script."""

    def __init__(self, script: Callable[[Seen, int], Reply], port: int = 0) -> None:
        self.script = script
        self.seen: List[Seen] = []
        self.lock = threading.Lock()
        self.conns: List[socket.socket] = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with stub.lock:
                    stub.conns.append(self.connection)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip(), 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _serve(self) -> None:
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                            self._body(), self.client_address)
                with stub.lock:
                    stub.seen.append(seen)
                    n = sum(1 for s in stub.seen if s.method == seen.method and s.path == seen.path)
                reply = stub.script(seen, n)
                if reply is None:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, body = reply
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Request-Id", "req-%d" % len(stub.seen))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def count(self, method: str, path_prefix: str) -> int:
        with self.lock:
            return sum(1 for s in self.seen if s.method == method and s.path.startswith(path_prefix))

    def close(self) -> None:
        """Stop serving and close every connection, idle keep-alive ones
        included (as a server that exits does)."""
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def error(status: int, code: str, message: str) -> Tuple[int, object]:
    return status, {"error": {"code": code, "message": message}}


class StubCase(unittest.TestCase):
    def stub(self, script: Callable[[Seen, int], Reply]) -> Stub:
        s = Stub(script)
        self.addCleanup(s.close)
        return s

    def client(self, stub: Stub, **kw: object) -> Client:
        kw.setdefault("retries", 4)
        kw.setdefault("backoff", 0.01)
        c = Client(stub.url, "key-1", **kw)  # type: ignore[arg-type]
        self.addCleanup(c.close)
        return c

    def sandbox(self, client: Client) -> Sandbox:
        return Sandbox(warren.SandboxInfo.from_json(SANDBOX), client)


class RetryTest(StubCase):
    def test_get_retried_on_503(self) -> None:
        def script(seen: Seen, n: int) -> Reply:
            return error(503, "unavailable", "busy") if n < 3 else (200, SANDBOX)

        s = self.stub(script)
        sb = Sandbox.get("sb-stub1", client=self.client(s))
        self.assertEqual(sb.id, "sb-stub1")
        self.assertEqual(s.count("GET", "/v1/sandboxes/sb-stub1"), 3)

    def test_get_gives_up_after_its_attempts(self) -> None:
        s = self.stub(lambda seen, n: error(503, "unavailable", "no capacity"))
        with self.assertRaises(warren.UnavailableError) as cm:
            self.client(s, retries=3).info()
        self.assertEqual(s.count("GET", "/v1/info"), 3)
        self.assertEqual(cm.exception.status, 503)
        self.assertEqual(cm.exception.code, "unavailable")
        self.assertEqual(cm.exception.message, "no capacity")

    def test_exec_not_retried(self) -> None:
        s = self.stub(lambda seen, n: error(503, "unavailable", "busy"))
        sb = self.sandbox(self.client(s))
        with self.assertRaises(warren.UnavailableError):
            sb.exec(["true"])
        with self.assertRaises(warren.UnavailableError):
            sb.exec("true", on_stdout=lambda b: None)
        with self.assertRaises(warren.UnavailableError):
            sb.start(["sleep", "1"])
        self.assertEqual(s.count("POST", "/v1/sandboxes/sb-stub1/exec"), 3)

    def test_exec_not_retried_on_broken_connection(self) -> None:
        s = self.stub(lambda seen, n: None)
        sb = self.sandbox(self.client(s))
        with self.assertRaises(warren.NetworkError):
            sb.exec(["true"])
        self.assertEqual(s.count("POST", "/v1/sandboxes/sb-stub1/exec"), 1)

    def test_calls_with_effects_retried_under_one_key(self) -> None:
        # A create, restore or snapshot whose answer was lost is sent again
        # with the same idempotency key: the server answers it once.
        def script(seen: Seen, n: int) -> Reply:
            if n % 2 == 1:
                return None
            return (200, {"sandboxes": [SANDBOX]} if seen.path.endswith("/restore") else
                    SNAPSHOT if seen.path.endswith("/snapshots") else SANDBOX)

        s = self.stub(script)
        c = self.client(s)
        Sandbox.create(client=c)
        Sandbox.restore("sn-stub1", client=c, idempotency_key="mine")
        self.sandbox(c).snapshot()
        keys = [x.headers.get("idempotency-key") for x in s.seen]
        self.assertEqual(len(keys), 6)
        for i in range(0, 6, 2):
            self.assertTrue(keys[i], "no idempotency key sent")
            self.assertEqual(keys[i], keys[i + 1], "the retry's key differs")
        self.assertEqual(keys[2], "mine")
        self.assertNotEqual(keys[0], keys[4])

    def test_stdin_and_upload_not_retried(self) -> None:
        s = self.stub(lambda seen, n: error(503, "unavailable", "busy"))
        c = self.client(s)
        sb = self.sandbox(c)
        with self.assertRaises(warren.UnavailableError):
            sb.process(7).send_stdin(b"x")
        with self.assertRaises(warren.UnavailableError):
            sb.files.write("/root/x", b"data")
        with self.assertRaises(warren.UnavailableError):
            sb.files.write("/root/x", io.BytesIO(b"data"))
        self.assertEqual(len(s.seen), 3)

    def test_broken_connection_retried_for_get(self) -> None:
        s = self.stub(lambda seen, n: None if n == 1 else (200, {"sandboxes": [SANDBOX]}))
        self.assertEqual([sb.id for sb in Sandbox.list(client=self.client(s))], ["sb-stub1"])
        self.assertEqual(s.count("GET", "/v1/sandboxes?limit=1000"), 2)

    def test_lists_follow_pages(self) -> None:
        pages = {
            "": {"sandboxes": [SANDBOX, dict(SANDBOX, id="sb-stub2")], "next_page_token": "t1"},
            "t1": {"sandboxes": [dict(SANDBOX, id="sb-stub3")], "next_page_token": "t2"},
            "t2": {"sandboxes": []},
        }

        def script(seen: Seen, n: int) -> Reply:
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(seen.path).query)
            return (200, pages[q.get("page_token", [""])[0]])

        s = self.stub(script)
        c = self.client(s)
        self.assertEqual([sb.id for sb in Sandbox.list(state=["running", "paused"], client=c)],
                         ["sb-stub1", "sb-stub2", "sb-stub3"])
        self.assertEqual([x.path for x in s.seen], [
            "/v1/sandboxes?state=running%2Cpaused&limit=1000",
            "/v1/sandboxes?state=running%2Cpaused&limit=1000&page_token=t1",
            "/v1/sandboxes?state=running%2Cpaused&limit=1000&page_token=t2",
        ])
        page = Sandbox.list_page(limit=2, client=c)
        self.assertEqual(([sb.id for sb in page.items], page.next_page_token), (["sb-stub1", "sb-stub2"], "t1"))
        self.assertEqual(s.seen[-1].path, "/v1/sandboxes?limit=2")
        with self.assertRaises(ValueError):
            Sandbox.list_page(limit=0, client=c)

    def test_lineage_follows_pages(self) -> None:
        def script(seen: Seen, n: int) -> Reply:
            if "page_token=p1" in seen.path:
                return (200, {"ancestors": ["sn-root"]})
            if seen.path.startswith("/v1/snapshots/sn-stub1/lineage"):
                return (200, {"ancestors": ["sn-stub0"], "next_page_token": "p1"})
            return (200, SNAPSHOT)

        s = self.stub(script)
        c = self.client(s)
        self.assertEqual(warren.Snapshot.from_json(SNAPSHOT, c).lineage(), ["sn-stub0", "sn-root"])

    def test_refused_connection_retried_until_the_server_listens(self) -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        c = Client("http://127.0.0.1:%d" % port, "key-1", retries=12, backoff=0.05)
        self.addCleanup(c.close)
        started: List[Stub] = []

        def later() -> None:
            time.sleep(0.3)
            started.append(Stub(lambda seen, n: (200, {"templates": []}), port=port))

        t = threading.Thread(target=later)
        t.start()
        try:
            self.assertEqual(c.templates(), [])
        finally:
            t.join()
            for st in started:
                st.close()

    def test_refused_exec_is_not_retried(self) -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        c = Client("http://127.0.0.1:%d" % port, "key-1", retries=5, backoff=0.5)
        self.addCleanup(c.close)
        sb = self.sandbox(c)
        t0 = time.monotonic()
        with self.assertRaises(warren.NetworkError):
            sb.exec(["true"])
        self.assertLess(time.monotonic() - t0, 0.25, "exec slept for a retry")

    def test_repeated_delete_that_finds_the_sandbox_gone_succeeds(self) -> None:
        # The first DELETE's answer is lost: the repeat's 404 means done.
        s = self.stub(lambda seen, n: None if n == 1 else error(404, "not_found", "sandbox sb-stub1 not found"))
        sb = self.sandbox(self.client(s))
        sb.delete()
        self.assertEqual(s.count("DELETE", "/v1/sandboxes/sb-stub1"), 2)
        # A 404 at the first attempt is an error.
        with self.assertRaises(warren.NotFoundError):
            sb.delete()

    def test_backoff_is_bounded(self) -> None:
        c = Client("http://127.0.0.1:1", "k", backoff=0.1)
        delays = [c.transport.delay(a) for a in range(1, 20)]
        self.assertTrue(all(0 <= d <= 1.6 for d in delays), delays)
        self.assertGreaterEqual(max(delays[4:]), 0.8)


class ErrorMappingTest(StubCase):
    @staticmethod
    def always(reply: Tuple[int, object]) -> Callable[[Seen, int], Reply]:
        def script(seen: Seen, n: int) -> Reply:
            return reply

        return script

    def test_codes(self) -> None:
        cases = [
            (error(400, "bad_request", "path climbs above /"), warren.BadRequestError),
            (error(401, "unauthorized", "invalid API key"), warren.UnauthorizedError),
            (error(403, "forbidden", "admin only"), warren.ForbiddenError),
            (error(404, "not_found", "sandbox sb-x not found"), warren.NotFoundError),
            (error(409, "conflict", "directory not empty"), warren.ConflictError),
            (error(409, "conflict", "sandbox sb-x is not running (state stopped)"), warren.SandboxGoneError),
            (error(409, "conflict", "sandbox sb-x is not running (its agent does not answer)"), warren.SandboxGoneError),
            # A paused sandbox is not gone: it can be resumed.
            (error(409, "conflict", "sandbox sb-x is paused: resume it first (or create it with auto_resume)"),
             warren.ConflictError),
            (error(409, "conflict", "sandbox sb-x is not running (state paused)"), warren.ConflictError),
            (error(409, "conflict", "sandbox sb-x is not running (state moving)"), warren.ConflictError),
            (error(413, "payload_too_large", "too big"), warren.PayloadTooLargeError),
            (error(500, "internal", "internal error"), warren.InternalError),
            (error(504, "timeout", "slow"), warren.RequestTimeout),
            ((502, b"<html>bad gateway</html>"), warren.UnavailableError),
            ((418, b"teapot"), warren.BadRequestError),
        ]
        for reply, cls in cases:
            with self.subTest(cls=cls.__name__, reply=reply):
                s = self.stub(self.always(reply))
                sb = self.sandbox(self.client(s, retries=1))
                with self.assertRaises(cls) as cm:
                    sb.files.remove("/root/x")
                e = cm.exception
                self.assertIs(type(e), cls)
                self.assertIsInstance(e, warren.WarrenError)
                self.assertEqual(e.status, reply[0])
                self.assertTrue(e.request_id and e.request_id.startswith("req-"))
        self.assertTrue(issubclass(warren.SandboxGoneError, warren.ConflictError))
        self.assertTrue(issubclass(warren.RequestTimeout, TimeoutError))
        self.assertTrue(issubclass(warren.CommandTimeout, TimeoutError))

    def test_wait_timeout_is_a_command_timeout(self) -> None:
        s = self.stub(lambda seen, n: error(504, "timeout", "process 7 has not ended after 100ms"))
        with self.assertRaises(warren.CommandTimeout):
            self.sandbox(self.client(s)).process(7).wait(0.1)

    def test_stream_error_event(self) -> None:
        lines = [
            {"type": "start", "pid": 9},
            {"type": "stdout", "data": "aGk="},
            {"type": "error", "error": "sandbox sb-stub1 is not running (its agent does not answer)"},
        ]
        body = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        s = self.stub(lambda seen, n: (200, body))
        got: List[bytes] = []
        with self.assertRaises(warren.SandboxGoneError):
            self.sandbox(self.client(s)).exec("echo hi", on_stdout=got.append)
        self.assertEqual(got, [b"hi"])

    def test_stream_cut_before_its_end(self) -> None:
        body = json.dumps({"type": "start", "pid": 9}).encode() + b"\n"
        s = self.stub(lambda seen, n: (200, body))
        with self.assertRaises(warren.StreamBrokenError):
            list(self.sandbox(self.client(s)).exec_stream(["sleep", "9"]))


class ConnectionTest(StubCase):
    def test_keep_alive_reuses_one_connection(self) -> None:
        s = self.stub(lambda seen, n: (200, SANDBOX))
        c = self.client(s)
        for _ in range(5):
            Sandbox.get("sb-stub1", client=c)
        self.assertEqual(len({seen.peer for seen in s.seen}), 1)

    def test_dropped_idle_connection_is_not_reused(self) -> None:
        s = self.stub(lambda seen, n: (200, SANDBOX))
        c = self.client(s)
        sb = Sandbox.get("sb-stub1", client=c)
        # The server closes its side of the idle connection (as at a
        # restart); the next call, even one never retried, must not fail.
        s.close()
        s2 = Stub(lambda seen, n: (200, {"pid": 1, "exit_code": 0, "stdout": "fresh", "stderr": "", "duration_ms": 1}),
                  port=int(s.url.rsplit(":", 1)[1]))
        self.addCleanup(s2.close)
        time.sleep(0.05)
        self.assertEqual(sb.exec(["true"]).stdout, "fresh")
        self.assertEqual(len(s2.seen), 1)

    def test_uploads_are_streamed_in_chunks(self) -> None:
        s = self.stub(lambda seen, n: (200, {"name": "x", "path": "/root/x", "type": "file", "size": 3}))
        sb = self.sandbox(self.client(s))
        reads: List[int] = []

        class Recording(io.BytesIO):
            def read(self, n: Optional[int] = -1) -> bytes:  # type: ignore[override]
                reads.append(-1 if n is None else n)
                return super().read(n)

        data = os.urandom(300 << 10)
        sb.files.write("/root/x", Recording(data), mode=0o600, user="nobody")
        sb.files.write("/root/y", b"abc")
        sb.files.write("/root/z", io.StringIO("h\u00e9llo"))
        up, small, text = s.seen
        self.assertEqual(up.headers.get("transfer-encoding"), "chunked")
        self.assertEqual(up.body, data)
        self.assertTrue(all(0 < n <= 64 << 10 for n in reads), reads)
        self.assertIn("mode=0600", up.path)
        self.assertIn("user=nobody", up.path)
        self.assertEqual(small.headers.get("content-length"), "3")
        self.assertEqual(text.body, "h\u00e9llo".encode())

    def test_many_threads_share_a_client(self) -> None:
        s = self.stub(lambda seen, n: (200, SANDBOX))
        c = self.client(s)
        errors: List[BaseException] = []

        def work() -> None:
            try:
                for _ in range(20):
                    self.assertEqual(Sandbox.get("sb-stub1", client=c).id, "sb-stub1")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(s.seen), 160)
        self.assertLessEqual(len({seen.peer for seen in s.seen}), 8)


class ConfigTest(StubCase):
    def test_key_from_argument_and_environment(self) -> None:
        s = self.stub(lambda seen, n: (200, {"templates": []}))
        Client(s.url, "arg-key").templates()
        with mock.patch.dict(os.environ, {"WARREN_URL": s.url, "WARREN_API_KEY": "env-key"}):
            Client().templates()
        self.assertEqual([x.headers["authorization"] for x in s.seen], ["Bearer arg-key", "Bearer env-key"])

    def test_admin_key_file_only_for_loopback(self) -> None:
        s = self.stub(lambda seen, n: (200, {"templates": []}))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "admin.key"), "w") as f:
                f.write("admin-key\n")
            env = {"WARREN_DATA_DIR": d, "WARREN_URL": s.url}
            with mock.patch.dict(os.environ, env):
                os.environ.pop("WARREN_API_KEY", None)
                Client().templates()
                self.assertEqual(s.seen[-1].headers["authorization"], "Bearer admin-key")
                with self.assertRaises(warren.ConfigurationError):
                    Client("http://warren.example.com:7777")
            with mock.patch.dict(os.environ, {"WARREN_DATA_DIR": os.path.join(d, "missing")}):
                os.environ.pop("WARREN_API_KEY", None)
                with self.assertRaises(warren.ConfigurationError):
                    Client("http://localhost:7777")

    def test_bad_url(self) -> None:
        for url in ("ftp://127.0.0.1", "http://", "http://127.0.0.1:99999"):
            with self.subTest(url=url), self.assertRaises(warren.ConfigurationError):
                Client(url, "k")

    def test_health_needs_no_key_and_does_not_raise(self) -> None:
        s = self.stub(lambda seen, n: (200, {"status": "ok"}))
        self.assertTrue(Client(s.url, "").health())
        self.assertNotIn("authorization", s.seen[-1].headers)
        self.assertFalse(Client("http://127.0.0.1:1", "").health())


class SnapshotTest(StubCase):
    def snapshot(self, client: Client, doc: Optional[dict] = None) -> warren.Snapshot:
        return warren.Snapshot.from_json(doc or SNAPSHOT, client)

    def test_snapshot_request_and_answer(self) -> None:
        s = self.stub(lambda seen, n: (201, SNAPSHOT))
        c = self.client(s)
        sb = self.sandbox(c)
        sn = sb.snapshot()
        sb.snapshot(wait=True)
        sb.snapshot(wait=True, wait_timeout=1.5)
        self.assertEqual([x.path for x in s.seen], ["/v1/sandboxes/sb-stub1/snapshots"] * 3)
        self.assertEqual([json.loads(x.body) for x in s.seen],
                         [{}, {"wait": True}, {"wait": True, "wait_timeout_seconds": 2}])
        self.assertEqual((sn.id, sn.sandbox_id, sn.parent), ("sn-stub1", "sb-stub1", "sn-stub0"))
        self.assertEqual((sn.template, sn.state, sn.error), ("default", "durable", ""))
        self.assertEqual((sn.disk_bytes, sn.changed_bytes, sn.stored_bytes), (4 << 30, 126976, 6123))
        self.assertEqual(sn.created_at.microsecond, 754090)  # type: ignore[union-attr]
        self.assertEqual(sn.durable_at.second, 43)  # type: ignore[union-attr]
        self.assertAlmostEqual(sn.ack_duration, 0.0345)
        self.assertAlmostEqual(sn.upload_duration, 0.14766)
        self.assertTrue(sn.is_durable)
        self.assertIs(sn.client, c)
        self.assertNotIn("client", dataclasses.asdict(sn))
        pending = warren.Snapshot.from_json(PENDING)
        self.assertEqual((pending.state, pending.durable_at, pending.upload_duration), ("pending", None, 0.0))
        self.assertTrue(pending.is_pending)
        with self.assertRaises(ValueError):
            sb.snapshot(wait_timeout=10)  # without wait
        with self.assertRaises(ValueError):
            sb.snapshot(wait=True, wait_timeout=0)
        self.assertEqual(len(s.seen), 3)

    def test_wait_that_runs_out_is_a_request_timeout(self) -> None:
        s = self.stub(lambda seen, n: error(504, "timeout", "snapshot sn-stub1 is not durable yet"))
        with self.assertRaises(warren.RequestTimeout) as cm:
            self.sandbox(self.client(s)).snapshot(wait=True, wait_timeout=1)
        self.assertEqual(cm.exception.status, 504)
        self.assertEqual(len(s.seen), 1)

    def test_snapshot_and_restore_retried_under_their_key(self) -> None:
        s = self.stub(lambda seen, n: error(503, "unavailable", "busy"))
        c = self.client(s, retries=3)
        with self.assertRaises(warren.UnavailableError):
            self.sandbox(c).snapshot()
        with self.assertRaises(warren.UnavailableError):
            Sandbox.restore("sn-stub1", 2, client=c)
        with self.assertRaises(warren.UnavailableError):
            c.gc()  # retried only when refused
        self.assertEqual([(x.method, x.path) for x in s.seen],
                         [("POST", "/v1/sandboxes/sb-stub1/snapshots")] * 3 + [("POST", "/v1/snapshots/sn-stub1/restore")] * 3 +
                         [("POST", "/v1/gc")])
        keys = [x.headers.get("idempotency-key") for x in s.seen]
        self.assertEqual(len(set(keys[:3])), 1)
        self.assertEqual(len(set(keys[3:6])), 1)
        self.assertNotEqual(keys[0], keys[3])
        self.assertIsNone(keys[6])

    def test_sandbox_gone(self) -> None:
        s = self.stub(lambda seen, n: error(409, "conflict", "sandbox sb-stub1 is not running (state stopped)"))
        with self.assertRaises(warren.SandboxGoneError):
            self.sandbox(self.client(s)).snapshot()

    def test_reads_are_retried(self) -> None:
        def script(seen: Seen, n: int) -> Reply:
            listing = urllib.parse.urlsplit(seen.path).path.endswith("/snapshots")
            if n == 1:
                return None if listing else error(503, "unavailable", "busy")
            return (200, {"snapshots": [SNAPSHOT, PENDING]}) if listing else (200, SNAPSHOT)

        s = self.stub(script)
        c = self.client(s)
        self.assertEqual(warren.get_snapshot("sn-stub1", client=c), self.snapshot(c))
        self.assertEqual([x.state for x in c.list_snapshots()], ["durable", "pending"])
        self.assertEqual([x.id for x in self.sandbox(c).snapshots()], ["sn-stub1", "sn-stub1"])
        self.assertEqual([(x.method, x.path) for x in s.seen], [("GET", "/v1/snapshots/sn-stub1")] * 2 +
                         [("GET", "/v1/snapshots?limit=1000")] * 2 +
                         [("GET", "/v1/sandboxes/sb-stub1/snapshots?limit=1000")] * 2)
        with self.assertRaises(ValueError):
            warren.get_snapshot("", client=c)

    def test_repeated_delete_that_finds_the_snapshot_gone_succeeds(self) -> None:
        s = self.stub(lambda seen, n: None if n == 1 else error(404, "not_found", "snapshot sn-stub1 not found"))
        c = self.client(s)
        sn = self.snapshot(c)
        sn.delete()  # through the snapshot's own client
        self.assertEqual(s.count("DELETE", "/v1/snapshots/sn-stub1"), 2)
        with self.assertRaises(warren.NotFoundError):
            c.delete_snapshot("sn-stub1")
        with self.assertRaises(warren.NotFoundError):
            warren.delete_snapshot(sn)

    def test_restore_request_and_answer(self) -> None:
        kids = [dict(SANDBOX, id=f"sb-kid{i}", origin="sn-stub1") for i in range(3)]
        s = self.stub(lambda seen, n: (201, {"sandboxes": kids}))
        c = self.client(s)
        sn = self.snapshot(c)
        got = Sandbox.restore(sn, 3, runtime="container", cpus=0.5, memory_mb=256, pids=64, timeout=30.2,
                              env={"A": 1}, metadata={"k": "v"})  # type: ignore[dict-item]
        self.assertEqual([k.id for k in got], ["sb-kid0", "sb-kid1", "sb-kid2"])
        self.assertEqual({k.info.origin for k in got}, {"sn-stub1"})
        self.assertTrue(all(k.client is c for k in got))  # the snapshot's client
        self.assertEqual(json.loads(s.seen[0].body), {
            "count": 3, "runtime": "container", "cpus": 0.5, "memory_mb": 256, "pids": 64,
            "timeout_seconds": 31, "env": {"A": "1"}, "metadata": {"k": "v"}})
        sn.restore(checkpoint_every=59.5)
        Sandbox.restore("sn-a/b", client=c)
        sn.restore(persistence="always")
        sn.restore(on_timeout="pause", idle_timeout=2.5, paused_ttl=3600, auto_resume=True)
        self.assertEqual([json.loads(x.body) for x in s.seen[1:5]],
                         [{"count": 1, "checkpoint_every_seconds": 60}, {"count": 1}, {"count": 1, "persistence": "always"},
                          {"count": 1, "on_timeout": "pause", "idle_timeout_seconds": 3, "paused_ttl_seconds": 3600,
                           "auto_resume": True}])
        with self.assertRaises(ValueError):
            sn.restore(idle_timeout=0)
        self.assertEqual(s.seen[2].path, "/v1/snapshots/sn-a%2Fb/restore")
        with got[0] as kid:  # each is a context manager that deletes it
            self.assertEqual(kid.id, "sb-kid0")
        self.assertEqual(s.count("DELETE", "/v1/sandboxes/sb-kid0"), 1)

    def test_restore_count_is_checked_before_sending(self) -> None:
        s = self.stub(lambda seen, n: (201, {"sandboxes": []}))
        c = self.client(s)
        for count in (0, -3):
            with self.subTest(count=count), self.assertRaises(warren.BadRequestError) as cm:
                Sandbox.restore("sn-stub1", count, client=c)
            self.assertEqual((cm.exception.code, cm.exception.status), ("bad_request", 0))
        with self.assertRaises(TypeError):
            Sandbox.restore("sn-stub1", True, client=c)
        with self.assertRaises(ValueError):
            Sandbox.restore("", client=c)
        with self.assertRaises(ValueError):
            Sandbox.restore("sn-stub1", timeout=0, client=c)
        self.assertEqual(s.seen, [])

    def test_wait_polls_until_not_pending(self) -> None:
        s = self.stub(lambda seen, n: (200, PENDING if n < 3 else SNAPSHOT))
        c = self.client(s)
        pending = self.snapshot(c, PENDING)
        t0 = time.monotonic()
        done = pending.wait(10)
        self.assertLess(time.monotonic() - t0, 2)
        self.assertEqual(done.state, "durable")
        self.assertEqual(pending.state, "pending")  # a Snapshot does not change
        self.assertEqual(s.count("GET", "/v1/snapshots/sn-stub1"), 3)
        self.assertIs(done.wait(), done)  # not pending: no call
        self.assertEqual(len(s.seen), 3)

    def test_wait_that_runs_out(self) -> None:
        s = self.stub(lambda seen, n: (200, PENDING))
        t0 = time.monotonic()
        with self.assertRaises(warren.RequestTimeout):
            self.snapshot(self.client(s), PENDING).wait(0.4)
        self.assertLess(time.monotonic() - t0, 1.5)
        self.assertLessEqual(len(s.seen), 5)  # backed off, not a busy loop

    def test_gc(self) -> None:
        result = {"manifests_deleted": 3, "chunks_deleted": 90, "bytes_freed": 99207458, "chunks_kept": 7}
        s = self.stub(lambda seen, n: (200, result))
        c = self.client(s)
        self.assertEqual(c.gc(), warren.GCResult(3, 90, 99207458, 7))
        warren.gc(0, client=c)
        warren.gc(grace_seconds=1.5, client=c)
        self.assertEqual([json.loads(x.body) for x in s.seen], [{}, {"grace_seconds": 0}, {"grace_seconds": 2}])
        with self.assertRaises(ValueError):
            c.gc(-1)

    def test_pools(self) -> None:
        pool = {"template": "default", "runtime": "container", "min": 2, "max": 4, "cpus": 1, "memory_mb": 512,
                "pids": 1024, "disk_mb": 4096, "target": 3, "ready": 2, "hits": 9, "misses": 1,
                "nodes": [{"node": "n1", "target": 3, "ready": 2, "hits": 9, "misses": 1,
                           "reported_at": "2026-12-02T10:00:00Z", "error": ""}],
                "updated_at": "2026-12-02T09:00:00Z"}

        def script(seen: Seen, n: int) -> Reply:
            if seen.method == "GET":
                return 200, {"pools": [pool]}
            if seen.method == "DELETE":
                return 204, b""
            return 200, pool

        s = self.stub(script)
        c = self.client(s)
        p = c.set_pool("default", min=2, max=4, memory_mb=512)
        self.assertEqual((p.target, p.ready, p.hits, p.misses, p.nodes[0].node), (3, 2, 9, 1, "n1"))
        self.assertEqual(c.pools(), [p])
        c.delete_pool("default", "vm")
        self.assertEqual([(x.method, x.path) for x in s.seen], [
            ("PUT", "/v1/pools/default"), ("GET", "/v1/pools"), ("DELETE", "/v1/pools/default?runtime=vm")])
        self.assertEqual(json.loads(s.seen[0].body), {"min": 2, "max": 4, "memory_mb": 512})

    def test_async(self) -> None:
        from warren import aio

        def script(seen: Seen, n: int) -> Reply:
            if seen.path.endswith("/restore"):
                return 201, {"sandboxes": [dict(SANDBOX, id="sb-kid", origin="sn-stub1")]}
            if seen.method == "DELETE":
                return 204, b""
            return 201, SNAPSHOT

        s = self.stub(script)
        sb = aio.AsyncSandbox(self.sandbox(self.client(s)))

        async def main() -> Tuple[str, List[str]]:
            snap = await sb.snapshot(wait=True)
            kids = await snap.restore(1)
            await aio.delete_snapshot(snap)
            return snap.state, [k.info.origin for k in kids]

        self.assertEqual(asyncio.run(main()), ("durable", ["sn-stub1"]))
        self.assertEqual([(x.method, x.path) for x in s.seen], [
            ("POST", "/v1/sandboxes/sb-stub1/snapshots"), ("POST", "/v1/snapshots/sn-stub1/restore"),
            ("DELETE", "/v1/snapshots/sn-stub1")])


class PreviewTest(StubCase):
    TOKEN = "ab" * 32

    def preview_stub(self, url: Optional[str]) -> Stub:
        state = {"public": False, "token": self.TOKEN, "url": url}

        def script(seen: Seen, n: int) -> Reply:
            if seen.method == "PUT":
                body = json.loads(seen.body)
                if "public" in body:
                    state["public"] = body["public"]
                if body.get("rotate_token"):
                    state["token"] = "cd" * 32
            return 200, dict(state)

        return self.stub(script)

    def test_preview_and_set_preview(self) -> None:
        s = self.preview_stub("https://{port}-sb-stub1.preview.example.com/")
        sb = self.sandbox(self.client(s))
        p = sb.preview()
        self.assertEqual(p, warren.Preview(False, self.TOKEN, "https://{port}-sb-stub1.preview.example.com/"))
        self.assertEqual(p.port_url(3000), "https://3000-sb-stub1.preview.example.com/")
        self.assertEqual(p.port_url(3000, with_token=True),
                         "https://3000-sb-stub1.preview.example.com/?warren_token=" + self.TOKEN)
        p = sb.set_preview(public=True)
        self.assertTrue(p.public)
        self.assertEqual(p.port_url(3000, with_token=True), "https://3000-sb-stub1.preview.example.com/")
        p = sb.set_preview(rotate_token=True)
        self.assertEqual(p.token, "cd" * 32)
        sb.set_preview()
        self.assertEqual([(x.method, x.path, x.body and json.loads(x.body)) for x in s.seen], [
            ("GET", "/v1/sandboxes/sb-stub1/preview", b""),
            ("PUT", "/v1/sandboxes/sb-stub1/preview", {"public": True}),
            ("PUT", "/v1/sandboxes/sb-stub1/preview", {"rotate_token": True}),
            ("PUT", "/v1/sandboxes/sb-stub1/preview", {}),
        ])
        for bad in (0, 65536, -1):
            with self.assertRaises(ValueError):
                p.port_url(bad)
        with self.assertRaises(TypeError):
            p.port_url("80")  # type: ignore[arg-type]

    def test_port_url(self) -> None:
        s = self.preview_stub("https://{port}-sb-stub1.preview.example.com/")
        sb = self.sandbox(self.client(s))
        self.assertEqual(sb.port_url(8080), "https://8080-sb-stub1.preview.example.com/?warren_token=" + self.TOKEN)
        self.assertEqual(sb.port_url(8080, with_token=False), "https://8080-sb-stub1.preview.example.com/")
        # No preview domain: the API's URL of the port.
        s = self.preview_stub(None)
        c = self.client(s)
        self.assertEqual(self.sandbox(c).port_url(8080), s.url + "/v1/sandboxes/sb-stub1/ports/8080/")

    def test_rotation_is_not_repeated(self) -> None:
        s = self.stub(lambda seen, n: error(503, "unavailable", "busy"))
        sb = self.sandbox(self.client(s))
        with self.assertRaises(warren.UnavailableError):
            sb.set_preview(rotate_token=True)
        self.assertEqual(s.count("PUT", "/v1/sandboxes/sb-stub1/preview"), 1)
        with self.assertRaises(warren.UnavailableError):
            sb.set_preview(public=False)
        self.assertEqual(s.count("PUT", "/v1/sandboxes/sb-stub1/preview"), 1 + 4)  # the client's 4 attempts

    def test_bad_gateway(self) -> None:
        err = warren.errors.error_from_response(502, json.dumps(
            {"error": {"code": "bad_gateway", "message": "nothing listens on port 80"}}).encode())
        self.assertIsInstance(err, warren.UnavailableError)
        self.assertEqual((err.code, err.status), ("bad_gateway", 502))

    def test_async(self) -> None:
        from warren import aio

        s = self.preview_stub(None)
        sb = aio.AsyncSandbox(self.sandbox(self.client(s)))

        async def main() -> Tuple[bool, str]:
            p = await sb.set_preview(public=True)
            return p.public, await sb.port_url(80)

        self.assertEqual(asyncio.run(main()), (True, s.url + "/v1/sandboxes/sb-stub1/ports/80/"))


class NetworkTest(StubCase):
    STATUS = {"policy": {"allow": ["pypi.org", "*.pythonhosted.org"], "deny": ["203.0.113.9"]},
              "address": "10.0.2.15", "gateway": "10.0.2.2", "denied": 3, "rate_limited": 1}
    RULE = {"transform": {"headers": {"Authorization": "Bearer ${secrets.openai}"}}}

    def network_stub(self) -> Stub:
        """A stub that keeps the policy PUT to it and answers it back, and
        answers creates and restores with a sandbox holding the policy of
        the request."""
        state = {"policy": {}}

        def script(seen: Seen, n: int) -> Reply:
            body = json.loads(seen.body) if seen.body else {}
            if seen.path.endswith("/network"):
                if seen.method == "PUT":
                    state["policy"] = body
                return 200, dict(self.STATUS, policy=state["policy"])
            if seen.path.endswith("/restore"):
                return 201, {"sandboxes": [dict(SANDBOX, id="sb-kid", network=body.get("network", {}))]}
            return 201, dict(SANDBOX, network=body.get("network", {}))

        return self.stub(script)

    def test_policy_model(self) -> None:
        P = warren.NetworkPolicy
        self.assertEqual(P(), P.from_json({}))
        self.assertEqual(P(), P.from_json(None))
        self.assertTrue(P().is_default)
        self.assertFalse(P(none=True).is_default)
        p = P(allow=["pypi.org", "10.1.0.0/16"], deny=iter(["203.0.113.9"]))
        self.assertEqual(p, P(allow=("pypi.org", "10.1.0.0/16"), deny=("203.0.113.9",)))
        self.assertEqual(p.allow, ("pypi.org", "10.1.0.0/16"))
        self.assertEqual(hash(p), hash(P.from_json(p.to_json())))
        self.assertEqual(P().to_json(), {})
        self.assertEqual(P(none=True).to_json(), {"none": True})
        self.assertEqual(p.to_json(), {"allow": ["pypi.org", "10.1.0.0/16"], "deny": ["203.0.113.9"]})
        # Types are checked here; what an entry says is the server's to judge.
        self.assertEqual(P(allow=["not a name!"]).allow, ("not a name!",))
        for kw in ({"allow": "pypi.org"}, {"deny": b"x"}, {"allow": [1]}, {"allow": 5}, {"none": 1},
                   {"none": "yes"}, {"allow": {"a": 1}}):
            with self.subTest(kw=kw), self.assertRaises(TypeError):
                P(**kw)  # type: ignore[arg-type]
        st = warren.NetworkStatus.from_json(self.STATUS)
        self.assertEqual(st, warren.NetworkStatus(P(allow=["pypi.org", "*.pythonhosted.org"], deny=["203.0.113.9"]),
                                                  "10.0.2.15", "10.0.2.2", 3, 1))
        # A newer server's fields are ignored.
        self.assertEqual(P.from_json({"allow": ["a.example"], "future": 1}), P(allow=["a.example"]))

    def test_sandbox_info_network(self) -> None:
        self.assertEqual(warren.SandboxInfo.from_json(SANDBOX).network, warren.NetworkPolicy())
        info = warren.SandboxInfo.from_json(dict(SANDBOX, network={"none": True}))
        self.assertEqual(info.network, warren.NetworkPolicy(none=True))

    def test_create_and_restore_encode_the_policy(self) -> None:
        s = self.network_stub()
        c = self.client(s)
        sb = Sandbox.create(client=c, network=warren.NetworkPolicy(allow=["pypi.org"], deny=["10.0.0.0/8"]))
        self.assertEqual(sb.info.network, warren.NetworkPolicy(allow=["pypi.org"], deny=["10.0.0.0/8"]))
        Sandbox.create(client=c, network={"none": True})
        Sandbox.create(client=c, network={"allow": ("a.example",), "none": None})
        Sandbox.create(client=c, network=warren.NetworkPolicy())  # the default, said explicitly
        plain = Sandbox.create(client=c)
        self.assertEqual(plain.info.network, warren.NetworkPolicy())
        kids = Sandbox.restore("sn-stub1", 2, client=c, network={"allow": ["198.51.100.0/24"]})
        self.assertEqual(kids[0].info.network, warren.NetworkPolicy(allow=["198.51.100.0/24"]))
        warren.Snapshot.from_json(SNAPSHOT, c).restore(network=warren.NetworkPolicy(none=True))
        Sandbox.restore("sn-stub1", client=c)
        self.assertEqual([(x.method, x.path, json.loads(x.body).get("network", "absent")) for x in s.seen], [
            ("POST", "/v1/sandboxes", {"allow": ["pypi.org"], "deny": ["10.0.0.0/8"]}),
            ("POST", "/v1/sandboxes", {"none": True}),
            ("POST", "/v1/sandboxes", {"allow": ["a.example"]}),
            ("POST", "/v1/sandboxes", {}),
            ("POST", "/v1/sandboxes", "absent"),
            ("POST", "/v1/snapshots/sn-stub1/restore", {"allow": ["198.51.100.0/24"]}),
            ("POST", "/v1/snapshots/sn-stub1/restore", {"none": True}),
            ("POST", "/v1/snapshots/sn-stub1/restore", "absent"),
        ])

    def test_bad_types_are_refused_before_sending(self) -> None:
        s = self.network_stub()
        c = self.client(s)
        sb = self.sandbox(c)
        calls: List[Callable[[], object]] = [
            lambda: Sandbox.create(client=c, network={"allow": "pypi.org"}),
            lambda: Sandbox.create(client=c, network={"alow": ["pypi.org"]}),  # a typo is not dropped
            lambda: Sandbox.create(client=c, network=["pypi.org"]),  # type: ignore[arg-type]
            lambda: Sandbox.create(client=c, network=True),  # type: ignore[arg-type]
            lambda: Sandbox.restore("sn-stub1", client=c, network={"deny": [None]}),
            lambda: sb.set_network(allow="pypi.org"),
            lambda: sb.set_network(none=1),  # type: ignore[arg-type]
            lambda: sb.set_network({"none": True}, allow=["a.example"]),  # both ways at once
            lambda: sb.set_network(warren.NetworkPolicy(), deny=["a.example"]),
            lambda: sb.set_network("pypi.org"),  # type: ignore[arg-type]
        ]
        for i, call in enumerate(calls):
            with self.subTest(i=i), self.assertRaises(TypeError):
                call()
        self.assertEqual(s.seen, [])

    def test_network_and_set_network(self) -> None:
        s = self.network_stub()
        sb = self.sandbox(self.client(s))
        st = sb.network()
        self.assertEqual((st.policy, st.address, st.gateway, st.denied, st.rate_limited),
                         (warren.NetworkPolicy(), "10.0.2.15", "10.0.2.2", 3, 1))
        st = sb.set_network(allow=["pypi.org", "*.pythonhosted.org"], deny=("203.0.113.9",))
        self.assertEqual(st.policy, warren.NetworkPolicy(allow=["pypi.org", "*.pythonhosted.org"],
                                                         deny=["203.0.113.9"]))
        self.assertEqual(sb.info.network, st.policy)  # info follows
        sb.set_network(warren.NetworkPolicy(none=True))
        self.assertEqual(sb.info.network, warren.NetworkPolicy(none=True))
        sb.set_network({"allow": ["10.1.0.0/16"]})
        sb.set_network(none=True)
        st = sb.set_network()  # replaced whole: back to the default
        self.assertTrue(st.policy.is_default)
        self.assertTrue(sb.info.network.is_default)
        self.assertEqual([(x.method, x.path, x.body and json.loads(x.body)) for x in s.seen], [
            ("GET", "/v1/sandboxes/sb-stub1/network", b""),
            ("PUT", "/v1/sandboxes/sb-stub1/network", {"allow": ["pypi.org", "*.pythonhosted.org"],
                                                       "deny": ["203.0.113.9"]}),
            ("PUT", "/v1/sandboxes/sb-stub1/network", {"none": True}),
            ("PUT", "/v1/sandboxes/sb-stub1/network", {"allow": ["10.1.0.0/16"]}),
            ("PUT", "/v1/sandboxes/sb-stub1/network", {"none": True}),
            ("PUT", "/v1/sandboxes/sb-stub1/network", {}),
        ])

    def test_errors_and_retries(self) -> None:
        bad = 'network.allow: "not a name!" is neither an IPv4 address, a CIDR nor a domain name'
        s = self.stub(lambda seen, n: error(400, "bad_request", bad))
        sb = self.sandbox(self.client(s))
        with self.assertRaises(warren.BadRequestError) as cm:
            sb.set_network(allow=["not a name!"])
        self.assertIn('"not a name!"', cm.exception.message)
        self.assertEqual(sb.info.network, warren.NetworkPolicy())  # unchanged
        with self.assertRaises(warren.BadRequestError):
            Sandbox.create(client=self.client(s), network={"allow": ["not a name!"]})
        s = self.stub(lambda seen, n: error(409, "conflict", "sandbox sb-stub1 is not running (state stopped)"))
        with self.assertRaises(warren.SandboxGoneError):
            self.sandbox(self.client(s)).set_network(none=True)
        # Replacing a policy whole is safe to repeat: retried as reads are.
        s = self.stub(lambda seen, n: error(503, "unavailable", "busy") if n < 3 else (200, self.STATUS))
        self.assertEqual(self.sandbox(self.client(s)).set_network(none=True).denied, 3)
        self.assertEqual(s.count("PUT", "/v1/sandboxes/sb-stub1/network"), 3)

    def test_async(self) -> None:
        from warren import aio

        s = self.network_stub()
        sb = aio.AsyncSandbox(self.sandbox(self.client(s)))

        async def main() -> Tuple[warren.NetworkPolicy, warren.NetworkPolicy, warren.NetworkPolicy]:
            a = (await sb.set_network(deny=["203.0.113.0/24"])).policy
            b = (await sb.set_network({"none": True})).policy
            return a, b, (await sb.network()).policy

        self.assertEqual(asyncio.run(main()), (warren.NetworkPolicy(deny=["203.0.113.0/24"]),
                                               warren.NetworkPolicy(none=True), warren.NetworkPolicy(none=True)))
        self.assertEqual(sb.info.network, warren.NetworkPolicy(none=True))

    def test_rules_model(self) -> None:
        P, R = warren.NetworkPolicy, warren.NetworkRule
        p = P(allow=["api.openai.com"], rules={"api.openai.com": [R(headers={"Authorization": "Bearer ${secrets.openai}"})]})
        # A rule as the API's dict is the same rule.
        self.assertEqual(p, P(allow=["api.openai.com"], rules={"api.openai.com": [self.RULE]}))
        self.assertEqual(p.to_json(), {"allow": ["api.openai.com"], "rules": {"api.openai.com": [self.RULE]}})
        self.assertEqual(P.from_json(p.to_json()), p)
        self.assertEqual(hash(p), hash(P.from_json(p.to_json())))  # still a hashable value
        self.assertEqual(p.rules["api.openai.com"][0].headers["Authorization"], "Bearer ${secrets.openai}")
        self.assertFalse(P(rules={"a.example": [R(headers={"X": "1"})]}).is_default)
        self.assertTrue(P(rules={}).is_default)
        # A newer server's fields of a rule are ignored.
        self.assertEqual(P.from_json({"rules": {"a.example": [{"transform": {"headers": {"X": "1"}, "body": 1}, "match": 2}]}}),
                         P(rules={"a.example": [R(headers={"X": "1"})]}))
        for rules in ("a.example", {"a.example": self.RULE}, {"a.example": ["x"]}, {1: [self.RULE]},
                      {"a.example": [{"headers": {"X": "1"}}]},  # not the API's shape: a typo is not dropped
                      {"a.example": [{"transform": {"header": {"X": "1"}}}]},
                      {"a.example": [{"transform": {"headers": {"X": 1}}}]}):
            with self.subTest(rules=rules), self.assertRaises(TypeError):
                P(rules=rules)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            R(headers=["X"])  # type: ignore[arg-type]

    def test_rules_sent_and_read(self) -> None:
        s = self.network_stub()
        c = self.client(s)
        rules = {"api.openai.com": [self.RULE], "*.example.com": [{"transform": {"headers": {"X-Key": "${e2b.secrets.k}"}}}]}
        sb = Sandbox.create(client=c, network={"allow": ["api.openai.com"], "rules": rules})
        self.assertEqual(sb.info.network.to_json(), {"allow": ["api.openai.com"], "rules": rules})
        Sandbox.restore("sn-stub1", client=c, network=warren.NetworkPolicy(rules={"api.openai.com": [self.RULE]}))
        st = sb.set_network(none=True, rules={"api.openai.com": [warren.NetworkRule(headers={"X-Org": "acme"})]})
        self.assertEqual(st.policy.rules["api.openai.com"][0].headers, {"X-Org": "acme"})
        self.assertEqual(sb.info.network, st.policy)
        with self.assertRaises(TypeError):
            sb.set_network({"none": True}, rules={"a.example": [self.RULE]})  # both ways at once
        self.assertEqual([(x.method, x.path, json.loads(x.body)["network"] if x.method == "POST" else json.loads(x.body))
                          for x in s.seen], [
            ("POST", "/v1/sandboxes", {"allow": ["api.openai.com"], "rules": rules}),
            ("POST", "/v1/snapshots/sn-stub1/restore", {"rules": {"api.openai.com": [self.RULE]}}),
            ("PUT", "/v1/sandboxes/sb-stub1/network",
             {"none": True, "rules": {"api.openai.com": [{"transform": {"headers": {"X-Org": "acme"}}}]}}),
        ])


class SecretTest(StubCase):
    SECRET = {"id": "sec_aaaaaaaaaaaaaaaaaaaa", "name": "openai", "version": 2, "metadata": {"team": "ml"},
              "created_at": "2026-12-07T10:00:00Z", "updated_at": "2026-12-07T11:00:00.5Z"}

    def test_routes(self) -> None:
        def script(seen: Seen, n: int) -> Reply:
            if seen.method == "DELETE":
                return 204, b""
            if seen.path == "/v1/secrets":
                return 200, {"secrets": [self.SECRET]}
            return (201 if seen.method == "PUT" else 200), self.SECRET

        s = self.stub(script)
        c = self.client(s)
        sec = c.set_secret("OpenAI", "sk-1", metadata={"team": "ml"})
        self.assertEqual(sec, warren.Secret("sec_aaaaaaaaaaaaaaaaaaaa", "openai", 2, {"team": "ml"},
                                            datetime(2026, 12, 7, 10, tzinfo=timezone.utc),
                                            datetime(2026, 12, 7, 11, 0, 0, 500000, tzinfo=timezone.utc)))
        c.set_secret("openai", "sk-2")
        self.assertEqual(c.list_secrets(), [sec])
        self.assertEqual(c.get_secret("a/b"), sec)
        c.delete_secret(sec.id)
        self.assertEqual([(x.method, x.path) for x in s.seen], [
            ("PUT", "/v1/secrets/OpenAI"), ("PUT", "/v1/secrets/openai"), ("GET", "/v1/secrets"),
            ("GET", "/v1/secrets/a%2Fb"), ("DELETE", "/v1/secrets/sec_aaaaaaaaaaaaaaaaaaaa")])
        self.assertEqual(json.loads(s.seen[0].body), {"value": "sk-1", "metadata": {"team": "ml"}})
        self.assertEqual(json.loads(s.seen[1].body), {"value": "sk-2"})  # metadata kept
        self.assertNotIn("sk-", repr(sec))

    def test_refused_before_sending(self) -> None:
        s = self.stub(lambda seen, n: (200, self.SECRET))
        c = self.client(s)
        for call in (lambda: c.set_secret("", "v"), lambda: c.get_secret(""), lambda: c.delete_secret("")):
            with self.assertRaises(ValueError):
                call()
        with self.assertRaises(TypeError):
            c.set_secret("openai", b"sk-1")  # type: ignore[arg-type]
        self.assertEqual(s.seen, [])

    def test_errors_and_retries(self) -> None:
        # A PUT that may have reached the server is not sent again: it would
        # count another version.
        s = self.stub(lambda seen, n: error(503, "unavailable", "busy"))
        with self.assertRaises(warren.UnavailableError):
            self.client(s).set_secret("openai", "sk-1")
        self.assertEqual(s.count("PUT", "/v1/secrets/openai"), 1)
        s = self.stub(lambda seen, n: error(404, "not_found", "no secret nope"))
        with self.assertRaises(warren.NotFoundError):
            self.client(s).get_secret("nope")
        s = self.stub(lambda seen, n: error(400, "bad_request", "a secret's value must be UTF-8 without CR, LF or NUL"))
        with self.assertRaises(warren.BadRequestError):
            self.client(s).set_secret("openai", "a\nb")


class ModelTest(unittest.TestCase):
    def test_origin(self) -> None:
        self.assertEqual(warren.SandboxInfo.from_json(SANDBOX).origin, "")
        self.assertEqual(warren.SandboxInfo.from_json(dict(SANDBOX, origin="sn-x")).origin, "sn-x")

    def test_persistence(self) -> None:
        self.assertEqual(warren.SandboxInfo.from_json(SANDBOX).persistence, "snapshot")
        self.assertIsNone(warren.SandboxInfo.from_json(SANDBOX).volume)
        info = warren.SandboxInfo.from_json(dict(SANDBOX, persistence="always", volume={
            "layer": "v-sb-1-000000000003", "recovery_point": "2026-12-06T08:00:00Z", "dirty_bytes": 65536, "cached_bytes": 4096,
            "durable_bytes": 8192, "durable_limit_bytes": 3 << 30, "used_bytes": 4096, "refused": "past its bound"}))
        self.assertEqual(info.persistence, "always")
        self.assertEqual(info.volume, warren.Volume(
            layer="v-sb-1-000000000003", recovery_point=datetime(2026, 12, 6, 8, 0, tzinfo=timezone.utc),
            dirty_bytes=65536, cached_bytes=4096, durable_bytes=8192, durable_limit_bytes=3 << 30, used_bytes=4096,
            refused="past its bound"))

    def test_checkpoint_and_restored(self) -> None:
        info = warren.SandboxInfo.from_json(SANDBOX)
        self.assertEqual((info.checkpoint_every, info.checkpoint, info.restored), (0, None, None))
        info = warren.SandboxInfo.from_json(dict(
            SANDBOX, state="running", checkpoint_every_seconds=60,
            checkpoint={"snapshot": "sn-c2", "at": "2026-12-02T10:01:00Z"},
            restored={"snapshot": "sn-c1", "snapshot_at": "2026-12-02T10:00:00Z", "at": "2026-12-02T10:00:30Z",
                      "lost_seconds": 12.5, "reason": "its node n1 stopped answering", "from": "n1"}))
        self.assertEqual(info.checkpoint_every, 60)
        self.assertEqual(info.checkpoint.snapshot, "sn-c2")  # type: ignore[union-attr]
        r = info.restored
        assert r is not None
        self.assertEqual((r.snapshot, r.lost_seconds, r.from_node, r.reason), ("sn-c1", 12.5, "n1", "its node n1 stopped answering"))
        self.assertEqual(r.at.second, 30)  # type: ignore[union-attr]

    def test_lifecycle_and_paused(self) -> None:
        info = warren.SandboxInfo.from_json(SANDBOX)
        self.assertEqual((info.on_timeout, info.idle_timeout, info.paused_ttl, info.auto_resume, info.paused),
                         ("delete", 0, 0, False, None))
        info = warren.SandboxInfo.from_json(dict(
            SANDBOX, state="paused", on_timeout="pause", idle_timeout_seconds=30, paused_ttl_seconds=604800,
            auto_resume=True, paused={"at": "2026-12-02T10:00:00Z", "reason": "idle for 30s", "auto": True,
                                      "memory": False, "snapshot": "sn-p1"}))
        self.assertEqual((info.on_timeout, info.idle_timeout, info.paused_ttl, info.auto_resume),
                         ("pause", 30, 604800, True))
        self.assertEqual(info.paused, warren.Paused(at=datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc),
                                                    reason="idle for 30s", auto=True, memory=False, snapshot="sn-p1"))
        held = warren.Paused.from_json({"at": "2026-12-02T10:00:00Z", "reason": "requested", "memory": True,
                                        "snapshot": "sn-p2", "image": "mi-1", "held": True})
        self.assertEqual((held.memory, held.image, held.held, held.workspace), (True, "mi-1", True, ""))

    def test_times(self) -> None:
        info = warren.SandboxInfo.from_json(SANDBOX)
        self.assertEqual(info.created_at.microsecond, 123456)  # type: ignore[union-attr]
        self.assertEqual(warren.models.parse_time("2026-11-29T12:00:00+02:00").hour, 10)  # type: ignore[union-attr]
        self.assertIsNone(warren.models.parse_time("0001-01-01T00:00:00Z"))

    def test_exec_result_check(self) -> None:
        ok = warren.ExecResult("a", "", 0, 0.1)
        self.assertIs(ok.check(), ok)
        with self.assertRaises(warren.CommandError) as cm:
            warren.ExecResult("", "boom", 3, 0.1).check()
        self.assertEqual(cm.exception.exit_code, 3)
        with self.assertRaises(warren.CommandTimeout):
            warren.ExecResult("", "", 137, 1.0, timed_out=True).check()


if __name__ == "__main__":
    unittest.main()
