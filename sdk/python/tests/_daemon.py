"""Starts and stops a real `warren server` for the live tests, or finds the
one they are pointed at.

By default the tests start `bin/warren server` on
$WARREN_TEST_TEMPLATE_CACHE/e2e-data (scripts/test.sh's layout). Two
variables change that:

- WARREN_TEST_DATA_DIR: start the server on this data directory instead
  (only one server may use a data directory at a time);
- WARREN_TEST_NET_POOL: give the server this sandbox network pool
  (--net-pool, e.g. 10.233.0.0/16) instead of "auto" (a free pool, never
  the default one, which a warren the user runs may hold);
- WARREN_TEST_URL and WARREN_TEST_API_KEY: start nothing, and test the
  server already serving there (with an admin key, for the admin tests).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
from typing import IO, Optional, Tuple

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SERVING = re.compile(r"serving on (http://\S+)")


def warren_binary() -> str:
    """The warren binary: $WARREN_BIN/warren (scripts/test.sh sets it),
    else bin/warren of this checkout."""
    d = os.environ.get("WARREN_BIN") or os.path.join(REPO, "bin")
    return os.path.join(d, "warren")


def existing_server() -> Optional[Tuple[str, str]]:
    """The URL and key of a server to test instead of starting one
    ($WARREN_TEST_URL, $WARREN_TEST_API_KEY), or None."""
    url = os.environ.get("WARREN_TEST_URL", "")
    if not url:
        return None
    return url, os.environ.get("WARREN_TEST_API_KEY", "")


def data_dir() -> str:
    """The data directory of the server the tests start."""
    return os.environ.get("WARREN_TEST_DATA_DIR") or os.path.join(
        os.environ.get("WARREN_TEST_TEMPLATE_CACHE", ""), "e2e-data")


def skip_reason() -> Optional[str]:
    """Why the live tests cannot run here, or None when they can."""
    server = existing_server()
    if server is not None:
        return None if server[1] else "WARREN_TEST_URL is set without WARREN_TEST_API_KEY"
    if os.geteuid() != 0:
        return "the live SDK tests start a warren server with container sandboxes, which needs root"
    if not os.environ.get("WARREN_TEST_TEMPLATE_CACHE") and not os.environ.get("WARREN_TEST_DATA_DIR"):
        return ("WARREN_TEST_TEMPLATE_CACHE is not set (scripts/test.sh sets it): "
                "the live tests use the daemon data directory kept there")
    if not os.access(warren_binary(), os.X_OK):
        return f"{warren_binary()} is missing: build it with scripts/deps.sh"
    return None


class Daemon:
    """A `warren server` on a data directory of its own, listening on a free
    loopback port."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.url = ""
        self.key = ""
        self.proc: Optional[subprocess.Popen] = None
        self._log: IO[bytes] = tempfile.TemporaryFile()

    def start(self, wait: float) -> None:
        """Start the server and wait until it serves; the template is built
        first if missing, which can take minutes."""
        os.makedirs(self.data_dir, mode=0o700, exist_ok=True)
        args = [warren_binary(), "server", "--data-dir", self.data_dir, "--listen", "127.0.0.1:0",
                "--template", "default"]
        args += ["--net-pool", os.environ.get("WARREN_TEST_NET_POOL") or "auto"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL)
        found = threading.Event()

        def scan() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for raw in self.proc.stdout:
                m = SERVING.search(raw.decode("utf-8", "replace"))
                if m and not found.is_set():
                    self.url = m.group(1)
                    found.set()
            found.set()  # the server exited

        threading.Thread(target=scan, daemon=True).start()
        if not found.wait(wait) or not self.url:
            exited = found.is_set()  # its output ended before it served
            self.stop()
            log = self.log()
            self.close()
            what = "exited before it served" if exited else f"did not serve within {wait:.0f}s"
            raise RuntimeError(f"warren server {what}:\n{log}")
        with open(os.path.join(self.data_dir, "admin.key"), encoding="utf-8") as f:
            self.key = f.read().strip()

    def log(self) -> str:
        """The server's stderr so far (its last 8 KiB)."""
        self._log.flush()
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - 8192))
        return self._log.read().decode("utf-8", "replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited after 20 s."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def close(self) -> None:
        """Drop the server's log."""
        self._log.close()
