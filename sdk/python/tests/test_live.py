"""The SDK against a real warren server and real sandboxes.

setUpModule starts `bin/warren server` on $WARREN_TEST_TEMPLATE_CACHE/e2e-data
(the data directory of the Go end-to-end suite, whose default template is
built there) on a free loopback port; tearDownModule deletes the sandboxes
the tests made and stops it with SIGTERM. The module is skipped, saying why,
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
from typing import List, Optional, Set, Tuple

import warren
from warren import Client, Sandbox

from . import _daemon

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")

DAEMON: Optional[_daemon.Daemon] = None
CLIENT: Optional[Client] = None
BEFORE: Set[str] = set()  # sandboxes that existed before the suite


def setUpModule() -> None:
    global DAEMON, CLIENT, BEFORE
    reason = _daemon.skip_reason()
    if reason:
        raise unittest.SkipTest(reason)
    d = _daemon.Daemon(os.path.join(os.environ["WARREN_TEST_TEMPLATE_CACHE"], "e2e-data"))
    d.start(wait=600)
    DAEMON = d
    CLIENT = Client(d.url, d.key)
    BEFORE = {sb.id for sb in Sandbox.list(client=CLIENT)}


def tearDownModule() -> None:
    global DAEMON, CLIENT
    try:
        if CLIENT is not None:
            for sb in Sandbox.list(client=CLIENT):
                if sb.id not in BEFORE and sb.state in ("running", "starting"):
                    sb.delete()
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


class LifecycleTest(unittest.TestCase):
    def test_create_get_list_timeout_and_context_manager(self) -> None:
        with Sandbox.create(client=client(), memory_mb=512, timeout=300, env={"GREETING": "hello"},
                            metadata={"suite": "python-sdk"}) as sb:
            self.assertRegex(sb.id, r"^sb-[a-z0-9]+$")
            self.assertEqual(sb.state, "running")
            self.assertIn("container", sb.isolation)
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
        assert DAEMON is not None
        with Client(DAEMON.url, "not-a-key") as bad:
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


class ExamplesTest(unittest.TestCase):
    def run_example(self, name: str, timeout: float) -> str:
        assert DAEMON is not None
        env = dict(os.environ, WARREN_URL=DAEMON.url, WARREN_API_KEY=DAEMON.key)
        env.pop("PYTHONPATH", None)
        p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], env=env, capture_output=True,
                           text=True, timeout=timeout)
        self.assertEqual(p.returncode, 0, f"{name} failed:\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def test_two_questions(self) -> None:
        self.assertEqual(self.run_example("two_questions.py", 120).split(), ["6", "3"])

    def test_tree_search(self) -> None:
        lines = self.run_example("tree_search.py", 300).splitlines()
        self.assertRegex(lines[-1], r"^solved: 8/8 tests pass after \d+ rounds \(\d+ sandboxes, \d+ edits on the winning branch\)$")
        self.assertEqual(lines[-2], "TABLE = [1, 4, 1, 5, 9, 2, 6, 5]")
        self.assertTrue(lines[0].startswith("round 0: "))
        self.assertTrue(any(re.match(r"^round 1: rewards \[", line) for line in lines))


if __name__ == "__main__":
    unittest.main()
