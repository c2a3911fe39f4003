"""The SDK against a real warren server and real sandboxes.

setUpModule starts `bin/warren server` on $WARREN_TEST_TEMPLATE_CACHE/e2e-data
(the data directory of the Go end-to-end suite, whose default template is
built there; $WARREN_TEST_DATA_DIR names another) on a free loopback port;
tearDownModule deletes the sandboxes and snapshots the tests made and stops
it with SIGTERM. With $WARREN_TEST_URL and $WARREN_TEST_API_KEY the tests use
that server instead (see _daemon.py). The module is skipped, saying why,
without root, without $WARREN_TEST_TEMPLATE_CACHE or without bin/warren.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from contextlib import ExitStack
from typing import List, Optional, Set, Tuple, Union

import warren
from warren import Client, Sandbox
from warren._transport import NEVER

from . import _daemon

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")

DAEMON: Optional[_daemon.Daemon] = None
CLIENT: Optional[Client] = None
URL = ""  # the server's URL and admin key
KEY = ""
BEFORE: Set[str] = set()  # sandboxes that existed before the suite
SNAPSHOTS_BEFORE: Set[str] = set()  # snapshots likewise


def setUpModule() -> None:
    global DAEMON, CLIENT, URL, KEY, BEFORE, SNAPSHOTS_BEFORE
    reason = _daemon.skip_reason()
    if reason:
        raise unittest.SkipTest(reason)
    server = _daemon.existing_server()
    if server is not None:
        URL, KEY = server
    else:
        d = _daemon.Daemon(_daemon.data_dir())
        d.start(wait=600)
        DAEMON = d
        URL, KEY = d.url, d.key
    CLIENT = Client(URL, KEY)
    BEFORE = {sb.id for sb in Sandbox.list(client=CLIENT)}
    SNAPSHOTS_BEFORE = {sn.id for sn in warren.list_snapshots(client=CLIENT)}


def tearDownModule() -> None:
    global DAEMON, CLIENT
    try:
        if CLIENT is not None:
            for sb in Sandbox.list(client=CLIENT):
                if sb.id not in BEFORE and sb.state in ("running", "starting", "paused"):
                    sb.delete()
            for sn in warren.list_snapshots(client=CLIENT):
                if sn.id not in SNAPSHOTS_BEFORE:
                    sn.delete()
            CLIENT.close()
    finally:
        if DAEMON is not None:
            DAEMON.stop()
            DAEMON.close()
        DAEMON = CLIENT = None


def client() -> Client:
    assert CLIENT is not None
    return CLIENT


def new_sandbox(test: unittest.TestCase, **kw: object) -> Sandbox:
    """A sandbox deleted when the test ends."""
    sb = Sandbox.create(client=client(), timeout=600, **kw)  # type: ignore[arg-type]
    test.addCleanup(sb.__exit__, None, None, None)
    return sb


class NodeTest(unittest.TestCase):
    def test_health_info_templates(self) -> None:
        c = client()
        self.assertTrue(c.health())
        info = c.info()
        self.assertTrue(info.version)
        self.assertTrue(any(r.name == "container" and r.available for r in info.runtimes))
        self.assertIn("default", [t.name for t in c.templates()])
        self.assertEqual(c.openapi().get("openapi", "")[:3], "3.1")


class PoolTest(unittest.TestCase):
    def test_set_claim_list_delete(self) -> None:
        c = client()
        if any(p.template == "default" and p.runtime == "container" for p in c.pools()):
            self.skipTest("the server keeps a default/container pool of its own")
        p = c.set_pool("default", min=1, runtime="container", memory_mb=288)
        self.addCleanup(lambda: c.delete_pool("default", "container") if c.pools() else None)
        self.assertEqual((p.min, p.max, p.memory_mb, p.runtime), (1, 1, 288, "container"))
        deadline = time.monotonic() + 60
        while c.pools()[0].ready < 1:
            self.assertLess(time.monotonic(), deadline, "the pool's member did not become ready")
            time.sleep(0.2)
        sb = new_sandbox(self, runtime="container", memory_mb=288, env={"FROM": "pool"})
        self.assertEqual(sb.exec(["printenv", "FROM"]).stdout, "pool\n")
        while c.pools()[0].hits < 1:
            self.assertLess(time.monotonic(), deadline, "the create was not counted as a hit")
            time.sleep(0.2)
        with self.assertRaises(warren.BadRequestError):
            c.set_pool("default", min=2, max=1)
        c.delete_pool("default", "container")
        with self.assertRaises(warren.NotFoundError):
            c.delete_pool("default", "container")


class LifecycleTest(unittest.TestCase):
    def test_create_get_list_timeout_and_context_manager(self) -> None:
        with Sandbox.create(client=client(), memory_mb=512, timeout=300, env={"GREETING": "hello"},
                            metadata={"suite": "python-sdk"}) as sb:
            self.assertRegex(sb.id, r"^sb-[a-z0-9]+$")
            self.assertEqual(sb.state, "running")
            # auto picks the strongest runtime the node has; its isolation
            # names it.
            self.assertIn(sb.info.runtime, ("vm", "gvisor", "container"))
            self.assertTrue(sb.isolation.startswith(sb.info.runtime), sb.isolation)
            self.assertEqual(sb.info.memory_mb, 512)
            self.assertEqual(sb.info.metadata, {"suite": "python-sdk"})
            self.assertIn(sb.id, [s.id for s in Sandbox.list(client=client())])
            self.assertEqual(Sandbox.get(sb.id, client=client()).info.template, "default")
            self.assertEqual(sb.exec("echo $GREETING").stdout, "hello\n")
            before = sb.info.expires_at
            info = sb.set_timeout(1800)
            assert before is not None and info.expires_at is not None
            self.assertGreater(info.expires_at, before)
            self.assertTrue(sb.is_running())
        self.assertFalse(sb.is_running())
        self.assertIn(Sandbox.get(sb.id, client=client()).state, ("stopped",))
        # Deleting an ended sandbox forgets it; then it is not found.
        sb.delete()
        with self.assertRaises(warren.NotFoundError):
            Sandbox.get(sb.id, client=client())

    def test_kill(self) -> None:
        sb = Sandbox.create(client=client())
        sb.kill()
        self.assertEqual(sb.refresh().state, "stopped")
        sb.delete()


class SleepTest(unittest.TestCase):
    def assert_paused(self, sb: Sandbox, info: warren.SandboxInfo) -> None:
        self.assertEqual(info.state, "paused")
        p = info.paused
        assert p is not None
        # A container pauses as a durable disk snapshot and a stop: it
        # keeps no memory; vm and gvisor do.
        self.assertEqual(p.memory, info.runtime != "container", info.runtime)
        self.assertEqual((p.reason, p.auto), ("requested", False))
        self.assertTrue(p.snapshot.startswith("sn-"), p.snapshot)
        self.assertEqual(Sandbox.get(sb.id, client=client()).info.paused, p)

    def test_an_exec_wakes_it_with_its_files(self) -> None:
        sb = new_sandbox(self, on_timeout="pause", idle_timeout=600, auto_resume=True)
        self.assertEqual((sb.info.on_timeout, sb.info.idle_timeout, sb.info.auto_resume), ("pause", 600, True))
        self.assertGreater(sb.info.paused_ttl, 0)  # the server's default
        self.assertIsNone(sb.info.paused)
        sb.files.write("/root/sleep.txt", "kept\n")
        self.assert_paused(sb, sb.pause())
        self.assertEqual(sb.exec(["cat", "/root/sleep.txt"]).stdout, "kept\n")
        info = sb.refresh()
        self.assertEqual((info.state, info.paused), ("running", None))

    def test_without_auto_resume_a_call_is_a_conflict(self) -> None:
        sb = new_sandbox(self, runtime="container")
        self.assertFalse(sb.info.auto_resume)
        sb.files.write("/root/sleep.txt", "kept\n")
        self.assert_paused(sb, sb.pause())
        for call in (lambda: sb.exec(["true"]), lambda: sb.files.read("/root/sleep.txt")):
            with self.assertRaises(warren.ConflictError) as cm:
                call()
            # Paused is not gone: it can be resumed.
            self.assertNotIsInstance(cm.exception, warren.SandboxGoneError)
            self.assertEqual(cm.exception.status, 409)
            self.assertIn("paused", cm.exception.message)
        self.assertEqual(sb.resume().state, "running")
        self.assertEqual(sb.files.read_text("/root/sleep.txt"), "kept\n")


class EventsTest(unittest.TestCase):
    def test_follow_a_sandbox_and_resume(self) -> None:
        c = client()
        sb = Sandbox.create(client=c, timeout=600)
        sn = sb.snapshot(wait=True)
        sb.kill()
        # From the start of what the server holds: a store older than its
        # replay window (the suite's data directory is kept between runs)
        # begins with events.lost, about others' events.
        it = (e for e in c.events(sandbox=sb.id, after=0) if e.kind != "events.lost")
        got = [next(it) for _ in range(5)]
        it.close()
        self.assertEqual([e.kind for e in got], ["sandbox.created", "sandbox.running", "snapshot.pending",
                                                 "snapshot.durable", "sandbox.deleted"])
        self.assertEqual({e.sandbox for e in got}, {sb.id})
        self.assertEqual(got[2].snapshot, sn.id)
        self.assertEqual(got[4].state, "stopped")
        self.assertTrue(all(a.id < b.id for a, b in zip(got, got[1:])))
        # From a position: only what came after it.
        it = c.events(sandbox=sb.id, after=got[2].id, kinds="snapshot")
        self.assertEqual(next(it).kind, "snapshot.durable")
        it.close()
        with self.assertRaises(warren.BadRequestError):
            next(c.events(kinds="sandbox.exploded"))
        sb.delete()


class TemplateTest(unittest.TestCase):
    def test_promote_a_snapshot_use_and_delete(self) -> None:
        c = client()
        sb = new_sandbox(self)
        sb.exec(["sh", "-c", "echo by hand > /root/made.txt"]).check()
        sn = sb.snapshot(wait=True)
        name = f"py-{int(time.time() * 1000) % 10**9}"
        lines: List[str] = []
        t = c.create_template(name, from_snapshot=sn.id, config={"env": {"ROLE": "py"}}, on_progress=lines.append)
        self.assertEqual((t.ref, t.state, t.config), (f"{name}@1", "ready", {"env": {"ROLE": "py"}}))
        self.assertTrue(any(line.startswith("[") for line in lines), lines)
        with Sandbox.create(client=c, template=name, timeout=600) as kid:
            self.assertEqual(kid.exec(["sh", "-c", "cat /root/made.txt; echo $ROLE"]).stdout, "by hand\npy\n")
            self.assertEqual(kid.info.template_version, f"{name}@1")
        self.assertEqual([v.ref for v in c.template_versions(name)], [f"{name}@1"])
        self.assertIn(name, [x.name for x in c.templates()])
        with self.assertRaises(warren.BadRequestError):
            c.create_template(name, spec="from: default\nsteps:\n  - nope: 1\n")
        c.delete_template(name)
        with self.assertRaises(warren.NotFoundError):
            c.template(name)


class PreviewTest(unittest.TestCase):
    def test_access_token_public_and_rotation(self) -> None:
        sb = new_sandbox(self)
        p = sb.preview()
        self.assertRegex(p.token, r"^[0-9a-f]{64}$")
        self.assertFalse(p.public)
        self.assertTrue(sb.set_preview(public=True).public)
        self.assertEqual(sb.preview().token, p.token)
        rotated = sb.set_preview(rotate_token=True)
        self.assertTrue(rotated.public)
        self.assertNotEqual(rotated.token, p.token)
        self.assertFalse(sb.set_preview(public=False).public)
        url = sb.port_url(8080, with_token=False)
        if p.url is None:
            self.assertEqual(url, client().url + "/v1/sandboxes/" + sb.id + "/ports/8080/")
        else:
            self.assertEqual(url, p.url.replace("{port}", "8080"))
        # A fork gets a token of its own.
        snap = sb.snapshot()
        self.addCleanup(snap.delete)
        kid = Sandbox.restore(snap, client=client())[0]
        self.addCleanup(kid.__exit__, None, None, None)
        self.assertNotEqual(kid.preview().token, rotated.token)


class NetworkTest(unittest.TestCase):
    """Egress policies, inspected through the API only: no sandbox here
    connects anywhere, and every entry is a name or range reserved for
    documentation (example.com, example.org, TEST-NET-2 and -3)."""

    ALLOW = ["example.com", "*.example.org", "198.51.100.0/24"]
    DENY = ["203.0.113.9"]

    def create(self, **kw: object) -> Sandbox:
        """A sandbox deleted when the test ends; the test is skipped on a
        server without sandbox networking, which refuses allow-lists."""
        try:
            return new_sandbox(self, **kw)
        except warren.BadRequestError as e:
            if "no sandbox networking" in e.message:
                self.skipTest(f"the server has no sandbox networking: {e.message}")
            raise

    def test_create_read_change_and_bad_entries(self) -> None:
        policy = warren.NetworkPolicy(allow=self.ALLOW, deny=self.DENY)
        sb = self.create(network=policy)
        self.assertEqual(sb.info.network, policy)
        self.assertEqual(Sandbox.get(sb.id, client=client()).info.network, policy)
        st = sb.network()
        self.assertEqual(st.policy, policy)
        self.assertEqual((st.address, st.gateway), ("10.0.2.15", "10.0.2.2"))
        self.assertGreaterEqual(min(st.denied, st.rate_limited), 0)

        # Replaced whole, by keywords, a policy or a dict.
        st = sb.set_network(none=True)
        self.assertEqual(st.policy, warren.NetworkPolicy(none=True))
        self.assertEqual(sb.info.network, st.policy)
        self.assertEqual(sb.network().policy, st.policy)
        st = sb.set_network({"deny": ["203.0.113.0/24", "*.example.net"]})
        self.assertEqual(st.policy, warren.NetworkPolicy(deny=["203.0.113.0/24", "*.example.net"]))
        self.assertEqual(sb.refresh().network, st.policy)

        # An invalid entry is the server's 400, naming it; nothing changes.
        for bad in ("not a name!", "2001:db8::/32", "198.51.100.0/33"):
            with self.subTest(bad=bad), self.assertRaises(warren.BadRequestError) as cm:
                sb.set_network(allow=["example.com", bad])
            self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
            self.assertIn(bad, cm.exception.message)
        self.assertEqual(sb.network().policy, st.policy)
        self.assertEqual(sb.info.network, st.policy)
        with self.assertRaises(warren.BadRequestError) as cm:
            Sandbox.create(client=client(), network={"deny": ["bad_entry!"]})
        self.assertIn("bad_entry!", cm.exception.message)

        self.assertTrue(sb.set_network().policy.is_default)
        self.assertTrue(sb.network().policy.is_default)
        sb.delete()
        with self.assertRaises(warren.SandboxGoneError):
            sb.set_network(none=True)

    def test_restore_takes_a_policy_not_the_snapshots(self) -> None:
        sb = self.create(network={"allow": self.ALLOW})
        snap = sb.snapshot()
        self.addCleanup(snap.delete)
        with ExitStack() as stack:
            kids = [stack.enter_context(k) for k in
                    snap.restore(2, timeout=600, network=warren.NetworkPolicy(none=True))]
            kids += [stack.enter_context(k) for k in Sandbox.restore(snap, client=client(), timeout=600)]
            self.assertEqual([k.info.network for k in kids],
                             [warren.NetworkPolicy(none=True)] * 2 + [warren.NetworkPolicy()])
            self.assertEqual([k.network().policy for k in kids], [k.info.network for k in kids])
        self.assertEqual(sb.network().policy, warren.NetworkPolicy(allow=self.ALLOW))

    def test_async(self) -> None:
        from warren.aio import AsyncSandbox

        sb = AsyncSandbox(self.create())

        async def main() -> Tuple[warren.NetworkPolicy, warren.NetworkPolicy]:
            st = await sb.set_network(allow=["example.com"])
            return st.policy, (await sb.network()).policy

        self.assertEqual(asyncio.run(main()), (warren.NetworkPolicy(allow=["example.com"]),) * 2)


class SecretTest(unittest.TestCase):
    """Secrets through the API, and egress rules that name them, read back
    through the API only: no sandbox here connects anywhere (what the node
    does with a rule is the Go end-to-end suite's)."""

    def secret(self, value: str, **kw: object) -> warren.Secret:
        """A secret of a name of its own, deleted when the test ends; the
        test is skipped on a server that keeps no secrets."""
        name = "py-sdk-" + os.urandom(6).hex()
        try:
            sec = client().set_secret(name, value, **kw)  # type: ignore[arg-type]
        except warren.NotFoundError as e:
            self.skipTest(f"the server keeps no secrets: {e.message}")

        def cleanup() -> None:
            try:
                client().delete_secret(sec.id)
            except warren.NotFoundError:
                pass

        self.addCleanup(cleanup)
        return sec

    def test_set_list_get_delete(self) -> None:
        c = client()
        sec = self.secret("sk-live-first", metadata={"suite": "python-sdk"})
        self.assertTrue(sec.id.startswith("sec_"))
        self.assertEqual((sec.version, sec.metadata), (1, {"suite": "python-sdk"}))
        # Names are stored in lower case; a new value is the next version,
        # and metadata not given is kept.
        sec2 = c.set_secret(sec.name.upper(), "sk-live-second")
        self.assertEqual((sec2.id, sec2.name, sec2.version, sec2.metadata), (sec.id, sec.name, 2, sec.metadata))
        self.assertEqual(c.get_secret(sec.id), sec2)
        self.assertEqual(c.get_secret(sec.name.upper()), sec2)
        listed = c.list_secrets()
        self.assertIn(sec2, listed)
        self.assertEqual([x.name for x in listed], sorted(x.name for x in listed))
        # No answer carries a value.
        for path in ("/v1/secrets", "/v1/secrets/" + sec.name):
            self.assertNotIn(b"sk-live", c.transport.request("GET", path).data)

        for name, value in (("bad name!", "v"), ("sec_x", "v"), (sec.name, ""), (sec.name, "sk-live\nsecond line")):
            with self.subTest(name=name), self.assertRaises(warren.BadRequestError) as cm:
                c.set_secret(name, value)
            self.assertNotIn("sk-live", cm.exception.message)
        self.assertEqual(c.get_secret(sec.id).version, 2)

        c.delete_secret(sec.name)
        with self.assertRaises(warren.NotFoundError):
            c.get_secret(sec.id)
        with self.assertRaises(warren.NotFoundError):
            c.delete_secret(sec.name)
        self.assertNotIn(sec.id, [x.id for x in c.list_secrets()])

    def test_rules_round_trip(self) -> None:
        sec = self.secret("sk-live-rule")
        rule = warren.NetworkRule(headers={"Authorization": "Bearer ${secrets.%s}" % sec.name})
        policy = warren.NetworkPolicy(allow=["example.com"], rules={"example.com": [rule]})
        try:
            sb = new_sandbox(self, network=policy)
        except warren.BadRequestError as e:
            if "no sandbox networking" in e.message:
                self.skipTest(f"the server has no sandbox networking: {e.message}")
            raise
        self.assertEqual(sb.info.network, policy)
        self.assertEqual(Sandbox.get(sb.id, client=client()).info.network, policy)
        self.assertEqual(sb.network().policy, policy)
        # Replaced whole: the new rules alone (E2B's placeholder too), then none.
        e2b = {"*.example.org": [{"transform": {"headers": {"X-Key": "${e2b.secrets.%s}" % sec.name}}}]}
        st = sb.set_network(rules=e2b)
        self.assertEqual(st.policy, warren.NetworkPolicy(rules=e2b))
        self.assertEqual(sb.refresh().network, st.policy)
        self.assertTrue(sb.set_network(allow=["example.com"]).policy.rules == {})
        # A rule naming a secret the tenant does not have is refused, naming it.
        with self.assertRaises(warren.BadRequestError) as cm:
            sb.set_network(rules={"example.com": [{"transform": {"headers": {"X": "${secrets.py-sdk-none}"}}}]})
        self.assertIn("py-sdk-none", cm.exception.message)
        self.assertEqual(sb.network().policy, warren.NetworkPolicy(allow=["example.com"]))


class SandboxTestCase(unittest.TestCase):
    """Tests sharing one sandbox, made for the class and deleted after it."""

    sb: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.sb = Sandbox.create(client=client(), timeout=600)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.delete()


class ExecTest(SandboxTestCase):
    def test_result_fields(self) -> None:
        r = self.sb.exec(["echo", "hi"])
        self.assertEqual(r.stdout, "hi\n")
        self.assertEqual(r.stderr, "")
        self.assertEqual(r.exit_code, 0)
        self.assertFalse(r.timed_out)
        self.assertTrue(r.ok)
        self.assertGreater(r.pid, 0)
        self.assertGreater(r.duration, 0)
        self.assertLess(r.duration, 10)

    def test_exit_codes(self) -> None:
        self.assertEqual(self.sb.exec(["true"]).exit_code, 0)
        self.assertEqual(self.sb.exec("exit 3").exit_code, 3)
        self.assertEqual(self.sb.exec(["sh", "-c", "exit 3"]).exit_code, 3)
        missing = self.sb.exec(["no-such-command-here"])
        self.assertEqual(missing.exit_code, 127)
        self.assertEqual(self.sb.exec("no-such-command-here").exit_code, 127)
        with self.assertRaises(warren.CommandError) as cm:
            self.sb.exec("echo bad >&2; exit 3").check()
        self.assertEqual(cm.exception.exit_code, 3)

    def test_stderr_is_separate(self) -> None:
        r = self.sb.exec("echo out; echo err >&2; echo out2")
        self.assertEqual(r.stdout, "out\nout2\n")
        self.assertEqual(r.stderr, "err\n")

    def test_argv_is_not_shell(self) -> None:
        self.assertEqual(self.sb.exec(["echo", "$HOME; ls"]).stdout, "$HOME; ls\n")
        self.assertEqual(self.sb.exec("echo $HOME").stdout, "/root\n")

    def test_streaming_callbacks_in_order(self) -> None:
        events: List[Tuple[str, bytes]] = []
        r = self.sb.exec(
            "for i in 1 2 3; do echo o$i; sleep 0.1; echo e$i >&2; sleep 0.1; done",
            on_stdout=lambda b: events.append(("out", b)),
            on_stderr=lambda b: events.append(("err", b)),
        )
        self.assertEqual(events, [("out", b"o1\n"), ("err", b"e1\n"), ("out", b"o2\n"),
                                  ("err", b"e2\n"), ("out", b"o3\n"), ("err", b"e3\n")])
        self.assertEqual((r.stdout, r.stderr, r.exit_code), ("o1\no2\no3\n", "e1\ne2\ne3\n", 0))

    def test_callbacks_come_while_it_runs(self) -> None:
        seen: List[float] = []
        t0 = time.monotonic()
        self.sb.exec("echo first; sleep 1; echo second", on_stdout=lambda b: seen.append(time.monotonic() - t0))
        self.assertEqual(len(seen), 2)
        self.assertLess(seen[0], seen[1] - 0.5, "the first line came only at the end")

    def test_exec_stream_exact_bytes(self) -> None:
        with self.sb.exec_stream(["sh", "-c", r"printf '\377\000x'; printf 'e' >&2; exit 4"]) as events:
            got = list(events)
        self.assertEqual(got[0].type, "start")
        self.assertGreater(got[0].pid, 0)
        self.assertEqual(got[-1].type, "end")
        self.assertEqual(b"".join(e.data for e in got if e.type == "stdout"), b"\xff\x00x")
        self.assertEqual(b"".join(e.data for e in got if e.type == "stderr"), b"e")
        assert events.result is not None
        self.assertEqual(events.result.exit_code, 4)
        self.assertEqual(events.pid, got[0].pid)

    def test_stdin(self) -> None:
        self.assertEqual(self.sb.exec(["cat"], stdin=b"bytes \x00 in").stdout, "bytes \x00 in")
        self.assertEqual(self.sb.exec(["wc", "-c"], stdin="h\u00e9").stdout.strip(), "3")
        self.assertEqual(self.sb.exec(["cat"]).stdout, "")  # no stdin: EOF at once

    def test_env_cwd_user(self) -> None:
        r = self.sb.exec(["sh", "-c", "id -un; pwd; echo $FOO"], env={"FOO": "bar baz"}, cwd="/tmp", user="nobody")
        self.assertEqual(r.stdout, "nobody\n/tmp\nbar baz\n")
        self.assertEqual(self.sb.exec(["id", "-u"]).stdout, "0\n")

    def test_timeout(self) -> None:
        t0 = time.monotonic()
        r = self.sb.exec(["sleep", "30"], timeout=0.5)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.exit_code, 137)
        self.assertFalse(r.ok)
        self.assertLess(time.monotonic() - t0, 10)
        with self.assertRaises(warren.CommandTimeout):
            r.check()

    def test_large_stdin_is_refused_with_a_typed_error(self) -> None:
        with self.assertRaises(warren.PayloadTooLargeError):
            self.sb.exec(["cat"], stdin=b"x" * (2 << 20))

    def test_eight_threads_on_one_sandbox(self) -> None:
        errors: List[BaseException] = []
        outputs: List[str] = []
        lock = threading.Lock()

        def work(t: int) -> None:
            try:
                for i in range(6):
                    r = self.sb.exec(["echo", f"{t}-{i}"])
                    with lock:
                        outputs.append(r.stdout.strip())
                # Streams and files from several threads at once too.
                chunks: List[bytes] = []
                self.sb.exec(["echo", f"s{t}"], on_stdout=chunks.append)
                self.sb.files.write(f"/tmp/thread-{t}", f"t{t}")
                with lock:
                    outputs.append(b"".join(chunks).decode().strip())
                    outputs.append(self.sb.files.read_text(f"/tmp/thread-{t}"))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(errors, [])
        want = {f"{t}-{i}" for t in range(8) for i in range(6)} | {f"s{t}" for t in range(8)} | {f"t{t}" for t in range(8)}
        self.assertEqual(sorted(outputs), sorted(want))


class ProcessTest(unittest.TestCase):
    def test_background_stdin_wait_replay_signal(self) -> None:
        sb = new_sandbox(self)
        p = sb.start(["sh", "-c", 'echo ready; read line; echo "got:$line"; sleep 60'], tag="reader")
        self.assertGreater(p.pid, 0)
        self.assertEqual(p.tag, "reader")
        p.send_stdin("abc\n")
        with self.assertRaises(warren.CommandTimeout):
            p.wait(timeout=0.3)
        out = b""
        with p.stream(replay=True) as events:
            for ev in events:
                out += ev.data if ev.type == "stdout" else b""
                if b"got:abc\n" in out:
                    break
        self.assertEqual(out, b"ready\ngot:abc\n")  # replayed from the start
        self.assertTrue(p.info().running)  # leaving the stream does not stop it
        self.assertIn(p.pid, [x.pid for x in sb.processes()])
        p.signal("TERM")
        r = p.wait(timeout=10)
        self.assertEqual(r.exit_code, 128 + 15)
        self.assertIn("terminated", r.status)
        self.assertFalse(p.info().running)
        # A stream of an ended process replays everything, then its end.
        with p.stream(replay=True) as events:
            evs = list(events)
        self.assertEqual(b"".join(e.data for e in evs if e.type == "stdout"), b"ready\ngot:abc\n")
        self.assertEqual(evs[-1].exit_code, 143)

    def test_pty_input_resize_and_stream(self) -> None:
        sb = new_sandbox(self)
        p = sb.start(["sh"], pty=(80, 24))
        # The terminal echoes the line typed: the marker the loop waits for
        # is only in the output ("T"TY echoes as typed, prints TTY).
        p.send_stdin(b'stty size; [ -t 0 ] && echo "T"TY\n')
        out = b""
        with p.stream(replay=True) as events:
            for ev in events:
                self.assertNotIn(ev.type, ("stdout", "stderr"))
                out += ev.data if ev.type == "pty" else b""
                if b"TTY\r\n" in out:
                    break
        self.assertIn(b"24 80\r\n", out)
        p.resize(100, 30)
        with self.assertRaises(warren.ConflictError):
            p.close_stdin()  # a terminal has no stdin to close: ^D instead
        p.send_stdin(b"stty size; exit 4\n")
        self.assertEqual(p.wait(timeout=30).exit_code, 4)
        with p.stream(replay=True) as events:
            out = b"".join(e.data for e in events if e.type == "pty")
        self.assertIn(b"30 100\r\n", out)
        with self.assertRaises(warren.ConflictError):
            sb.start(["sleep", "60"]).resize(80, 24)  # no terminal
        with self.assertRaises(ValueError):
            sb.start(["sh"], pty=(0, 24))
        with sb.exec_stream(["tty"], pty=(80, 24)) as events:
            evs = list(events)
        self.assertTrue(b"".join(e.data for e in evs if e.type == "pty").startswith(b"/dev/pts/"))
        self.assertEqual(events.result.exit_code, 0)

    def test_stdin_streamed_from_a_file_object_then_closed(self) -> None:
        sb = new_sandbox(self)
        p = sb.start(["sha256sum"])
        data = os.urandom(3 << 20)
        p.send_stdin(io.BytesIO(data[: 1 << 20]))
        p.send_stdin(io.BytesIO(data[1 << 20:]), close=True)
        r = p.output(timeout=30)
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(r.stdout.split()[0], hashlib.sha256(data).hexdigest())

    def test_kill_and_numeric_signal(self) -> None:
        import signal as sig

        sb = new_sandbox(self)
        p = sb.start(["sleep", "60"])
        p.kill()
        self.assertEqual(p.wait(timeout=10).exit_code, 137)
        q = sb.start(["sleep", "60"])
        q.signal(sig.SIGINT)
        self.assertEqual(q.wait(timeout=10).exit_code, 128 + 2)
        with self.assertRaises(warren.BadRequestError):
            sb.start(["sleep", "60"]).signal("NOPE")

    def test_start_of_a_missing_command(self) -> None:
        sb = new_sandbox(self)
        with self.assertRaises(warren.BadRequestError):
            sb.start(["no-such-command-here"])


class FilesTest(SandboxTestCase):
    def test_text_round_trip(self) -> None:
        f = self.sb.files
        info = f.write("/root/hello.txt", "h\u00e9llo\n")
        self.assertEqual((info.path, info.type, info.size, info.mode), ("/root/hello.txt", "file", 7, 0o644))
        self.assertEqual(f.read("/root/hello.txt"), "h\u00e9llo\n".encode())
        self.assertEqual(f.read_text("hello.txt"), "h\u00e9llo\n")  # relative to the home
        self.assertEqual(self.sb.exec(["cat", "/root/hello.txt"]).stdout, "h\u00e9llo\n")
        f.write("/root/hello.txt", b"")
        self.assertEqual(f.read("/root/hello.txt"), b"")

    def test_five_mib_binary_streamed_from_a_file_object(self) -> None:
        data = os.urandom(5 << 20)
        reads: List[int] = []
        with tempfile.TemporaryFile() as tmp:
            tmp.write(data)
            tmp.seek(0)
            real_read = tmp.read

            def counting_read(n: int = -1) -> bytes:
                reads.append(n)
                return real_read(n)

            tmp.read = counting_read  # type: ignore
            info = self.sb.files.write("/root/blob/big.bin", tmp)
        self.assertEqual(info.size, 5 << 20)
        self.assertGreater(len(reads), 50, "the file object was not read in chunks")
        self.assertTrue(all(0 < n <= 64 << 10 for n in reads))
        self.assertEqual(self.sb.files.read("/root/blob/big.bin"), data)
        out = io.BytesIO()
        self.assertEqual(self.sb.files.read_into("/root/blob/big.bin", out), 5 << 20)
        self.assertEqual(out.getvalue(), data)
        r = self.sb.exec(["sha256sum", "/root/blob/big.bin"])
        self.assertEqual(r.stdout.split()[0], hashlib.sha256(data).hexdigest())

    def test_list_stat_mkdir_move_remove(self) -> None:
        f = self.sb.files
        d = f.mkdir("/root/tree/a/b")
        self.assertTrue(d.is_dir)
        self.assertEqual(d.mode, 0o755)
        f.write("/root/tree/a/b/one.txt", "1")
        f.write("/root/tree/two.sh", "#!/bin/sh\necho two\n", mode=0o755)
        names = sorted(e.path for e in f.list("/root/tree", depth=3))
        self.assertEqual(names, ["/root/tree/a", "/root/tree/a/b", "/root/tree/a/b/one.txt", "/root/tree/two.sh"])
        self.assertEqual([e.name for e in f.list("/root/tree")], ["a", "two.sh"])
        st = f.stat("/root/tree/two.sh")
        self.assertEqual((st.type, st.size, st.mode, st.owner), ("file", 19, 0o755, "root"))
        self.assertEqual(self.sb.exec(["/root/tree/two.sh"]).stdout, "two\n")
        moved = f.move("/root/tree/a/b/one.txt", "/root/tree/one.txt")
        self.assertEqual(moved.path, "/root/tree/one.txt")
        self.assertFalse(f.exists("/root/tree/a/b/one.txt"))
        self.assertTrue(f.exists("/root/tree/one.txt"))
        with self.assertRaises(warren.ConflictError) as cm:
            f.remove("/root/tree")
        self.assertNotIsInstance(cm.exception, warren.SandboxGoneError)
        f.remove("/root/tree/one.txt")
        f.remove("/root/tree", recursive=True)
        with self.assertRaises(warren.NotFoundError):
            f.stat("/root/tree")

    def test_mode_and_owner(self) -> None:
        f = self.sb.files
        info = f.write("/tmp/owned", "x", mode="600", user="nobody")
        self.assertEqual((info.mode, info.owner), (0o600, "nobody"))
        self.assertEqual(f.mkdir("/tmp/private", mode=0o700, user="nobody").owner, "nobody")
        self.assertEqual(self.sb.exec(["stat", "-c", "%U %a", "/tmp/owned"]).stdout, "nobody 600\n")


class SnapshotTest(unittest.TestCase):
    """Snapshots and forks. The class shares one durable snapshot of a
    sandbox prepared with files; each test deletes the forks it makes."""

    sb: Sandbox
    snap: warren.Snapshot

    @classmethod
    def setUpClass(cls) -> None:
        cls.sb = Sandbox.create(client=client(), timeout=600)
        try:
            cls.sb.files.write("/root/work/state.txt", "before the snapshot\n")
            cls.sb.exec("mkdir -p /opt/data && seq 1 1000 > /opt/data/numbers").check()
            cls.snap = cls.sb.snapshot(wait=True, wait_timeout=300)
        except BaseException:
            cls.sb.delete()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.delete()
        try:
            cls.snap.delete()
        except warren.NotFoundError:
            pass

    def restore(self, snapshot: Union[warren.Snapshot, str], count: int) -> List[Sandbox]:
        """count forks of snapshot, deleted when the test ends."""
        stack = ExitStack()
        self.addCleanup(stack.close)
        return [stack.enter_context(sb) for sb in Sandbox.restore(snapshot, count, client=client(), timeout=600)]

    def test_workspace_snapshot(self) -> None:
        with Sandbox.create(client=client(), workspace_mb=128, timeout=600) as sb:
            self.assertEqual(sb.info.workspace_mb, 128)
            sb.files.write("/workspace/notes.txt", "kept\n")
            sb.files.write("/root/elsewhere.txt", "not in the workspace\n")
            snap = sb.snapshot(wait=True, scope="workspace")
            self.addCleanup(snap.delete)
            self.assertEqual((snap.scope, snap.state), ("workspace", "durable"))
            (fork,) = self.restore(snap, 1)
            self.assertEqual(fork.info.workspace_origin, snap.id)
            self.assertEqual(fork.files.read("/workspace/notes.txt"), b"kept\n")
            self.assertNotEqual(fork.exec("test -e /root/elsewhere.txt").exit_code, 0)
        with self.assertRaises(warren.BadRequestError):
            self.sb.snapshot(scope="workspace")  # it has no workspace disk

    def test_snapshot_with_wait_is_durable(self) -> None:
        sn = self.snap
        self.assertRegex(sn.id, r"^sn-[a-z0-9]+$")
        self.assertEqual((sn.state, sn.error), ("durable", ""))
        self.assertTrue(sn.is_durable)
        self.assertFalse(sn.is_pending or sn.is_failed)
        self.assertEqual((sn.sandbox_id, sn.template, sn.scope), (self.sb.id, "default", "root"))
        self.assertEqual((sn.parent, sn.lineage()), ("", []))  # a first snapshot of a template's sandbox
        self.assertEqual(sn.disk_bytes, self.sb.info.disk_mb << 20)
        self.assertGreater(sn.changed_bytes, 0)
        self.assertGreater(sn.stored_bytes, 0)
        assert sn.created_at is not None and sn.durable_at is not None
        self.assertLessEqual(sn.created_at, sn.durable_at)
        self.assertGreater(sn.ack_duration, 0)
        self.assertLess(sn.ack_duration, 10)
        self.assertGreater(sn.upload_duration, 0)
        # A durable snapshot is final: fetched again, it is the same.
        self.assertEqual(warren.get_snapshot(sn.id, client=client()), sn)
        self.assertEqual(sn.wait(), sn)
        self.assertIn(sn.id, [x.id for x in self.sb.snapshots()])
        self.assertIn(sn.id, [x.id for x in client().list_snapshots()])

    def test_live_fork_inherits_and_diverges(self) -> None:
        parent = new_sandbox(self, env={"ROLE": "parent"}, metadata={"run": "fork"})
        parent.files.write("/root/state.txt", "shared\n")
        kids = parent.fork(2, env={"ROLE": "child"})
        for k in kids:
            self.addCleanup(k.__exit__, None, None, None)
        self.assertEqual(len(kids), 2)
        for i, k in enumerate(kids):
            self.assertEqual(k.files.read_text("/root/state.txt"), "shared\n")
            self.assertEqual(k.exec(["printenv", "ROLE"]).stdout, "child\n")
            self.assertEqual(k.info.metadata.get("run"), "fork")
            self.assertTrue(k.info.origin.startswith("sn-"))
            k.files.write("/root/state.txt", f"kid {i}\n")
        self.assertEqual(kids[0].files.read_text("/root/state.txt"), "kid 0\n")
        self.assertEqual(parent.files.read_text("/root/state.txt"), "shared\n")
        with self.assertRaises(warren.BadRequestError):
            parent.fork(0)

    def test_three_forks_share_the_disk_not_their_changes(self) -> None:
        kids = self.restore(self.snap, 3)
        ids = [k.id for k in kids]
        self.assertEqual(len(set(ids)), 3)
        self.assertNotIn(self.sb.id, ids)
        for k in kids:
            self.assertEqual((k.state, k.info.origin), ("running", self.snap.id))
            self.assertEqual(k.files.read_text("/root/work/state.txt"), "before the snapshot\n")
            self.assertEqual(k.exec("wc -l < /opt/data/numbers").stdout, "1000\n")
            self.assertEqual(Sandbox.get(k.id, client=client()).info.origin, self.snap.id)
        self.assertEqual(self.sb.info.origin, "")
        hostnames = {sb.exec("hostname").stdout for sb in kids + [self.sb]}
        self.assertEqual(len(hostnames), 4, "forks share a hostname")
        # A change in one fork is seen neither in another nor in the parent.
        kids[0].files.write("/root/work/state.txt", "changed in the first fork\n")
        kids[0].exec("rm /opt/data/numbers").check()
        self.assertEqual(kids[0].files.read_text("/root/work/state.txt"), "changed in the first fork\n")
        for sb in (kids[1], kids[2], self.sb):
            self.assertEqual(sb.files.read_text("/root/work/state.txt"), "before the snapshot\n")
            self.assertTrue(sb.files.exists("/opt/data/numbers"))
        # Nor is a change in the parent after the snapshot.
        self.sb.files.write("/root/after-the-snapshot.txt", "later")
        self.assertFalse(kids[1].files.exists("/root/after-the-snapshot.txt"))

    def test_snapshot_of_a_fork_descends_from_its_origin(self) -> None:
        kid = self.snap.restore(timeout=600)[0]
        self.addCleanup(kid.__exit__, None, None, None)
        kid.files.write("/root/work/gen2.txt", "second generation")
        sn = kid.snapshot()  # returns at once, pending while it uploads
        self.addCleanup(self.forget, sn)
        self.assertIn(sn.state, ("pending", "durable"))
        self.assertEqual((sn.sandbox_id, sn.parent, sn.lineage()), (kid.id, self.snap.id, [self.snap.id]))
        done = sn.wait(300)
        self.assertEqual(done.state, "durable")
        self.assertIsNotNone(done.durable_at)
        self.assertEqual(done.id, sn.id)
        # Restored by id, the grandchild has both generations' files.
        grandkid = self.restore(sn.id, 1)[0]
        self.assertEqual(grandkid.info.origin, sn.id)
        self.assertEqual(grandkid.files.read_text("/root/work/gen2.txt"), "second generation")
        self.assertEqual(grandkid.files.read_text("/root/work/state.txt"), "before the snapshot\n")

    @staticmethod
    def forget(sn: warren.Snapshot) -> None:
        try:
            sn.delete()
        except warren.NotFoundError:
            pass

    def test_list_get_delete(self) -> None:
        sb = new_sandbox(self)
        sb.files.write("/root/one.txt", "1")
        first = sb.snapshot()
        self.addCleanup(self.forget, first)
        sb.files.write("/root/two.txt", "2")
        second = sb.snapshot(wait=True)
        self.addCleanup(self.forget, second)
        self.assertEqual(second.parent, first.id)
        self.assertEqual([x.id for x in sb.snapshots()], [first.id, second.id])  # oldest first
        everyone = [x.id for x in warren.list_snapshots(client=client())]
        self.assertLess(everyone.index(first.id), everyone.index(second.id))
        self.assertEqual(warren.get_snapshot(first.id, client=client()).id, first.id)
        self.assertEqual(client().get_snapshot(second.id).state, "durable")

        client().delete_snapshot(first)
        with self.assertRaises(warren.NotFoundError) as cm:
            warren.get_snapshot(first.id, client=client())
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
        self.assertNotIn(first.id, [x.id for x in sb.snapshots()])
        with self.assertRaises(warren.NotFoundError):
            first.delete()  # a 404 at the first attempt is an error
        with self.assertRaises(warren.NotFoundError):
            Sandbox.restore(first, client=client())
        # Its layer stays while a descendant needs it.
        kid = self.restore(second, 1)[0]
        self.assertEqual(kid.files.read_text("/root/one.txt") + kid.files.read_text("/root/two.txt"), "12")

        warren.delete_snapshot(second.id, client=client())
        with self.assertRaises(warren.NotFoundError):
            second.refresh()
        with self.assertRaises(warren.NotFoundError):
            warren.get_snapshot("sn-doesnotexist0", client=client())

    def test_named_snapshot(self) -> None:
        name = f"py-named-{os.getpid()}"
        sn = self.sb.snapshot(wait=True, name=name)
        self.addCleanup(self.forget, sn)
        self.assertEqual((sn.name, sn.state), (name, "durable"))
        self.assertEqual(warren.get_snapshot(name, client=client()).id, sn.id)
        self.assertIn(name, [x.name for x in self.sb.snapshots()])
        with self.assertRaises(warren.ConflictError) as conflict:
            self.sb.snapshot(name=name)
        self.assertIn(sn.id, conflict.exception.message)
        for bad in ("sn-not-a-name", "-x", "a/b"):
            with self.subTest(name=bad), self.assertRaises(warren.BadRequestError):
                self.sb.snapshot(name=bad)
        (kid,) = self.restore(name, 1)
        self.assertEqual(kid.info.origin, sn.id)
        self.assertEqual(kid.files.read_text("/root/work/state.txt"), "before the snapshot\n")
        warren.delete_snapshot(name, client=client())
        with self.assertRaises(warren.NotFoundError):
            warren.get_snapshot(name, client=client())

    def test_restore_count_out_of_range(self) -> None:
        def forks() -> List[str]:
            return [sb.id for sb in Sandbox.list(client=client())
                    if sb.info.origin == self.snap.id and sb.state == "running"]

        before = forks()
        for count in (0, -1, 1000):
            with self.subTest(count=count), self.assertRaises(warren.BadRequestError) as cm:
                Sandbox.restore(self.snap, count, client=client())
            self.assertEqual(cm.exception.code, "bad_request")
        self.assertEqual(cm.exception.status, 400)  # 1000: the server said so
        self.assertIn("count", cm.exception.message)
        self.assertEqual(forks(), before, "a refused restore started sandboxes")

    def test_snapshot_of_a_deleted_sandbox(self) -> None:
        sb = Sandbox.create(client=client())
        sb.delete()
        with self.assertRaises(warren.SandboxGoneError):
            sb.snapshot()
        sb.delete()

    def test_another_tenant_cannot_see_it(self) -> None:
        try:
            answer = client().transport.request("POST", "/v1/keys", json_body={"tenant": "py-sdk-other"}, retry=NEVER)
        except warren.ForbiddenError:
            self.skipTest("the test key is not the admin key: no tenant key can be made")
        with Client(URL, answer.json()["key"]) as other:
            with self.assertRaises(warren.NotFoundError):
                warren.get_snapshot(self.snap.id, client=other)
            with self.assertRaises(warren.NotFoundError):
                Sandbox.restore(self.snap.id, client=other)
            with self.assertRaises(warren.NotFoundError):
                other.delete_snapshot(self.snap.id)
            with self.assertRaises(warren.NotFoundError):
                Sandbox.get(self.sb.id, client=other).snapshots()
            self.assertNotIn(self.snap.id, [x.id for x in other.list_snapshots()])
            with self.assertRaises(warren.ForbiddenError):
                other.gc()
        self.assertEqual(warren.get_snapshot(self.snap.id, client=client()).state, "durable")

    def test_gc(self) -> None:
        # The server's default grace (an hour) spares every young object,
        # and what a snapshot needs is never collected.
        r = client().gc()
        self.assertIsInstance(r, warren.GCResult)
        self.assertGreaterEqual(min(r.manifests_deleted, r.chunks_deleted, r.bytes_freed), 0)
        self.assertGreater(r.chunks_kept, 0)
        with self.assertRaises(ValueError):
            client().gc(grace_seconds=-1)
        kid = self.restore(self.snap, 1)[0]
        self.assertEqual(kid.files.read_text("/root/work/state.txt"), "before the snapshot\n")


class ErrorTest(unittest.TestCase):
    def test_unknown_sandbox(self) -> None:
        with self.assertRaises(warren.NotFoundError) as cm:
            Sandbox.get("sb-doesnotexist0", client=client())
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
        self.assertTrue(cm.exception.request_id)

    def test_path_escape(self) -> None:
        sb = new_sandbox(self)
        with self.assertRaises(warren.BadRequestError) as cm:
            sb.files.read("/../etc/x")
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(warren.BadRequestError):
            sb.files.write("/../etc/x", b"x")
        with self.assertRaises(warren.NotFoundError):
            sb.files.read("/no/such/file")

    def test_bad_key(self) -> None:
        with Client(URL, "not-a-key") as bad:
            with self.assertRaises(warren.UnauthorizedError) as cm:
                bad.info()
            self.assertEqual(cm.exception.status, 401)
            self.assertTrue(bad.health())  # needs no key

    def test_sandbox_gone_after_delete(self) -> None:
        sb = Sandbox.create(client=client())
        sb.delete()
        with self.assertRaises(warren.SandboxGoneError) as cm:
            sb.exec(["true"])
        self.assertIsInstance(cm.exception, warren.ConflictError)
        self.assertEqual(cm.exception.status, 409)
        with self.assertRaises(warren.SandboxGoneError):
            sb.files.read("/etc/hostname")
        with self.assertRaises(warren.SandboxGoneError):
            sb.set_timeout(60)
        sb.delete()  # forgets it

    def test_bad_create(self) -> None:
        with self.assertRaises(warren.NotFoundError):
            Sandbox.create("no-such-template", client=client())
        with self.assertRaises(warren.BadRequestError):
            Sandbox.create(client=client(), memory_mb=-5)


class AsyncTest(unittest.TestCase):
    def test_async_sandbox(self) -> None:
        from warren.aio import AsyncSandbox

        async def main() -> Tuple[List[str], bytes, str, int]:
            async with await AsyncSandbox.create(client=client(), timeout=300) as sb:
                results = await asyncio.gather(*(sb.exec(["echo", str(i)]) for i in range(4)))
                out = b""
                async for ev in sb.exec_stream("echo streamed"):
                    out += ev.data
                await sb.files.write("/root/a.txt", "async")
                p = await sb.start(["cat"])
                await p.send_stdin("piped", close=True)
                r = await p.output(timeout=10)
                return [x.stdout for x in results], out, await sb.files.read_text("/root/a.txt"), len(r.stdout)

        outs, streamed, text, n = asyncio.run(main())
        self.assertEqual(outs, ["0\n", "1\n", "2\n", "3\n"])
        self.assertEqual((streamed, text, n), (b"streamed\n", "async", 5))

    def test_async_snapshot_and_restore(self) -> None:
        from warren import aio
        from warren.aio import AsyncSandbox

        async def main() -> Tuple[List[str], List[str], str, str, List[str]]:
            async with await AsyncSandbox.create(client=client(), timeout=300) as sb:
                await sb.files.write("/root/a.txt", "forked")
                snap = await sb.snapshot()
                try:
                    kids = await AsyncSandbox.restore(snap, count=2, timeout=300)
                    try:
                        texts = await asyncio.gather(*(k.files.read_text("/root/a.txt") for k in kids))
                        origins = [k.info.origin for k in kids]
                    finally:
                        await asyncio.gather(*(k.delete() for k in kids))
                    await snap.wait(300)
                    listed = [x.id for x in await sb.snapshots()]
                finally:
                    await aio.delete_snapshot(snap)
                try:
                    await aio.get_snapshot(snap.id, client=client())
                    gone = "still there"
                except warren.NotFoundError:
                    gone = "not found"
                return texts, origins, snap.state, gone, listed

        texts, origins, state, gone, listed = asyncio.run(main())
        self.assertEqual(texts, ["forked", "forked"])
        self.assertEqual(len(set(origins)), 1)
        self.assertTrue(origins[0].startswith("sn-"))
        self.assertEqual(listed, origins[:1])
        self.assertEqual((state, gone), ("durable", "not found"))


class ExamplesTest(unittest.TestCase):
    def run_example(self, name: str, timeout: float) -> str:
        env = dict(os.environ, WARREN_URL=URL, WARREN_API_KEY=KEY)
        env.pop("PYTHONPATH", None)
        p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], env=env, capture_output=True,
                           text=True, timeout=timeout)
        self.assertEqual(p.returncode, 0, f"{name} failed:\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def test_two_questions(self) -> None:
        self.assertEqual(self.run_example("two_questions.py", 120).split(), ["6", "3"])

    def test_tree_search(self) -> None:
        before = {sn.id for sn in warren.list_snapshots(client=client())}
        lines = self.run_example("tree_search.py", 300).splitlines()
        m = re.match(r"^solved: 8/8 tests pass after (\d+) rounds \((\d+) rollouts forked from (\d+) snapshots, "
                     r"(\d+) edits on the winning branch\)$", lines[-1])
        assert m is not None, lines[-1]
        rounds, rollouts, snapshots, edits = (int(g) for g in m.groups())
        self.assertEqual(rollouts, 8 * rounds)
        self.assertEqual(snapshots, edits + 1)  # the root, then one a branch
        self.assertEqual(lines[-2], "TABLE = [1, 4, 1, 5, 9, 2, 6, 5]")
        self.assertTrue(lines[0].startswith("round 0: "))
        self.assertTrue(any(re.match(r"^round 1: rewards \[", line) for line in lines))
        # It deleted its sandboxes and its snapshots.
        self.assertEqual([sb.id for sb in Sandbox.list(client=client())
                          if sb.info.metadata.get("example") == "tree_search" and sb.state == "running"], [])
        self.assertEqual({sn.id for sn in warren.list_snapshots(client=client())} - before, set())


if __name__ == "__main__":
    unittest.main()
