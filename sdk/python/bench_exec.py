"""Exec round trip through the SDK vs a local fork/exec, in one process.

Measures, in the same Python process, N calls of ``sb.exec(["true"])``
(SDK -> HTTP -> warren server -> the sandbox's agent -> fork/exec in the
sandbox -> result back) and N calls of ``subprocess.run(["true"])`` on this
machine, alternating the two so that both see the same machine noise, and
prints p50 and p99 of each and their ratio.

Run against a warren server (WARREN_URL and WARREN_API_KEY, or a local
server's admin key)::

    python3 sdk/python/bench_exec.py [-n 200]
"""

from __future__ import annotations

import argparse
import math
import platform
import subprocess
import sys
import time
from typing import List

from warren import Sandbox, default_client


def percentile(samples: List[float], p: float) -> float:
    """The p-th percentile by the nearest-rank method."""
    s = sorted(samples)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def main() -> None:
    """Measure and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=200, help="calls of each kind (default 200)")
    ap.add_argument("--warmup", type=int, default=10, help="unmeasured calls of each kind first (default 10)")
    args = ap.parse_args()
    sdk: List[float] = []
    local: List[float] = []
    with Sandbox.create(timeout=600, metadata={"bench": "exec"}) as sb:
        for i in range(args.warmup + args.n):
            t0 = time.perf_counter()
            r = sb.exec(["true"])
            t1 = time.perf_counter()
            subprocess.run(["true"], check=True)
            t2 = time.perf_counter()
            if r.exit_code != 0:
                sys.exit(f"exec true failed: {r}")
            if i >= args.warmup:
                sdk.append(t1 - t0)
                local.append(t2 - t1)
    print(f"python {platform.python_version()}, server {default_client().url}, sandbox {sb.isolation}, n={args.n}")
    print(f"{'case':<34}{'p50':>10}{'p99':>10}")
    for name, xs in (('sb.exec(["true"])', sdk), ('subprocess.run(["true"])', local)):
        print(f"{name:<34}{percentile(xs, 50) * 1e3:>8.2f}ms{percentile(xs, 99) * 1e3:>8.2f}ms")
    r50 = percentile(sdk, 50) / percentile(local, 50)
    r99 = percentile(sdk, 99) / percentile(local, 99)
    print(f"{'ratio (SDK / subprocess)':<34}{r50:>9.2f}x{r99:>9.2f}x")


if __name__ == "__main__":
    main()
