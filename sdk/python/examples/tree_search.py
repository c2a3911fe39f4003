"""A tiny tree search over sandboxes, the way an RL harness uses them.

The task: make ``answer(i)`` in ``/root/work/solution.py`` return the i-th
decimal digit of pi for i in 0..7, without being told pi. A hidden test
suite (the grader, installed in every sandbox outside the workspace) runs
the candidate program and reports which tests fail; the reward is the
number of tests passed. The "policy" stands in for a model: it proposes an
edit of the failing entries (a guess, avoiding guesses that earlier rollouts
showed wrong), which is written into the sandbox's workspace, as an agent's
edit tool would.

Each round forks 8 rollouts from the best sandbox so far, samples one edit
in each (in parallel threads), grades them by running the candidate program
in its sandbox, keeps the best one if it beats its parent (otherwise it
backtracks to the parent) and branches again from the winner. Candidate
code only ever runs inside a sandbox, never on this machine.

How it forks today: warren has no snapshots yet, so a fork is "create a
sandbox and copy the parent's workspace files into it" (``/root/work``,
through the files API). Once the server has snapshots, ``fork`` becomes
``Sandbox.restore(parent.snapshot(), count=8)``: the whole disk rather
than the workspace, in milliseconds. Nothing else here changes.

Run against a warren server (WARREN_URL and WARREN_API_KEY, or a local
server's admin key)::

    python3 sdk/python/examples/tree_search.py

The last line it prints is ``solved: 8/8 tests pass after N rounds (...)``.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Set

try:
    from warren import Sandbox
except ImportError:  # run from a checkout without installing the SDK
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from warren import Sandbox

WORKSPACE = "/root/work"
SOLUTION = WORKSPACE + "/solution.py"
HISTORY = WORKSPACE + "/history.log"
ROLLOUTS = 8
MAX_ROUNDS = 20
SEED = 7

# The hidden tests: the grader knows the digits, the policy does not.
GRADER = r'''
import importlib.util, json, sys
# No bytecode cache: a fork copies the workspace, and an edit that keeps the
# file's size within the same second would be graded from the parent's
# stale .pyc.
sys.dont_write_bytecode = True
DIGITS = "14159265"
failed = []
try:
    spec = importlib.util.spec_from_file_location("solution", "/root/work/solution.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for i, want in enumerate(DIGITS):
        try:
            if str(mod.answer(i)) != want:
                failed.append(i)
        except Exception:
            failed.append(i)
except Exception:
    failed = list(range(len(DIGITS)))
print(json.dumps({"passed": len(DIGITS) - len(failed), "total": len(DIGITS), "failed": failed}))
'''

INITIAL_SOLUTION = "TABLE = [0, 0, 0, 0, 0, 0, 0, 0]\n\n\ndef answer(i):\n    return TABLE[i]\n"
TABLE_LINE = re.compile(r"^TABLE = (\[.*\])$", re.M)


class Node:
    """A sandbox of the search tree: its grade, and the edit that made it."""

    def __init__(self, sandbox: Sandbox, passed: int, total: int, failed: List[int],
                 edit: Optional[Dict[int, int]] = None) -> None:
        self.sandbox = sandbox
        self.passed, self.total, self.failed = passed, total, failed
        self.edit = edit or {}


def grade(sb: Sandbox, edit: Optional[Dict[int, int]] = None) -> Node:
    """Run the hidden tests against the sandbox's candidate program."""
    out = json.loads(sb.exec(["python3", "/opt/grader/grade.py"], timeout=60).check().stdout)
    return Node(sb, out["passed"], out["total"], out["failed"], edit)


def new_sandbox() -> Sandbox:
    """A fresh sandbox with the grader installed."""
    sb = Sandbox.create(timeout=600, metadata={"example": "tree_search"})
    try:
        sb.files.write("/opt/grader/grade.py", GRADER)
    except BaseException:
        sb.delete()
        raise
    return sb


def fork(parent: Sandbox) -> Sandbox:
    """A new sandbox holding a copy of parent's workspace. With snapshots:
    ``Sandbox.restore(parent.snapshot(), count=8)``."""
    child = new_sandbox()
    try:
        for entry in parent.files.list(WORKSPACE, depth=16):
            if entry.is_file:
                child.files.write(entry.path, parent.files.read(entry.path), mode=entry.mode)
    except BaseException:
        child.delete()
        raise
    return child


def apply_edit(sb: Sandbox, edit: Dict[int, int]) -> None:
    """Write the edited program into the sandbox's workspace, and log the
    edit there (the log travels with the branch)."""
    src = sb.files.read_text(SOLUTION)
    match = TABLE_LINE.search(src)
    if match is None:
        raise ValueError("solution.py has no TABLE line")
    table = json.loads(match.group(1))
    for i, v in edit.items():
        table[i] = v
    sb.files.write(SOLUTION, TABLE_LINE.sub("TABLE = " + json.dumps(table), src, count=1))
    log = sb.files.read_text(HISTORY) + json.dumps(edit, sort_keys=True) + "\n"
    sb.files.write(HISTORY, log)


def rollout(parent: Node, wrong: Dict[int, Set[int]], round_no: int, index: int) -> Node:
    """Fork the parent, apply one sample of the policy, grade the result."""
    rng = random.Random(SEED * 100003 + round_no * 101 + index)
    # The policy: a new guess for every failing test, never one known wrong.
    edit = {i: rng.choice([v for v in range(10) if v not in wrong[i]]) for i in parent.failed}
    child = fork(parent.sandbox)
    try:
        apply_edit(child, edit)
        return grade(child, edit)
    except BaseException:
        child.delete()
        raise


def main() -> None:
    """Search until every test passes (or MAX_ROUNDS), printing each round."""
    root = new_sandbox()
    try:
        root.files.write(SOLUTION, INITIAL_SOLUTION)
        root.files.write(HISTORY, "")
        best = grade(root)
    except BaseException:
        root.delete()
        raise
    wrong: Dict[int, Set[int]] = {i: set() for i in range(best.total)}
    created, rounds = 1, 0
    print(f"round 0: {best.passed}/{best.total} tests pass", flush=True)
    try:
        with ThreadPoolExecutor(max_workers=ROLLOUTS) as pool:
            while best.passed < best.total and rounds < MAX_ROUNDS:
                rounds += 1
                futures = [pool.submit(rollout, best, wrong, rounds, i) for i in range(ROLLOUTS)]
                children: List[Node] = []
                error: Optional[BaseException] = None
                for f in futures:
                    try:
                        children.append(f.result())
                    except BaseException as e:  # noqa: BLE001 - raised after cleanup
                        error = error or e
                created += len(children)
                if error is not None:
                    for c in children:
                        c.sandbox.delete()
                    raise error
                # Learn from every rollout's reward which guesses are wrong.
                for c in children:
                    for i, v in c.edit.items():
                        if i in c.failed:
                            wrong[i].add(v)
                winner = max(children, key=lambda n: n.passed)  # the first of the best
                if winner.passed > best.passed:
                    best.sandbox.delete()
                    best, verdict = winner, "branch from the best rollout"
                else:
                    verdict = "no rollout improved: backtrack to the parent"
                for c in children:
                    if c is not best:
                        c.sandbox.delete()
                rewards = [c.passed for c in children]
                print(f"round {rounds}: rewards {rewards}, best {best.passed}/{best.total}: {verdict}", flush=True)
        solution = best.sandbox.files.read_text(SOLUTION)
        edits = best.sandbox.files.read_text(HISTORY).splitlines()
        print(TABLE_LINE.search(solution).group(0))  # type: ignore[union-attr]
        word = "solved" if best.passed == best.total else "not solved"
        print(
            f"{word}: {best.passed}/{best.total} tests pass after {rounds} rounds "
            f"({created} sandboxes, {len(edits)} edits on the winning branch)",
            flush=True,
        )
    finally:
        best.sandbox.delete()
    if best.passed != best.total:
        sys.exit(1)


if __name__ == "__main__":
    main()
