"""A tiny tree search over sandboxes, the way an RL harness uses them.

The task: make ``answer(i)`` in ``/root/work/solution.py`` return the i-th
decimal digit of pi for i in 0..7, without being told pi. A hidden test
suite (the grader, installed outside the workspace) runs the candidate
program and reports which tests fail; the reward is the number of tests
passed. The "policy" stands in for a model: it proposes an edit of the
failing entries (a guess, avoiding guesses that earlier rollouts showed
wrong), which is written into the sandbox's workspace, as an agent's edit
tool would.

The nodes of the search tree are snapshots. Each round forks 8 rollouts
from the best snapshot so far (``Sandbox.restore(best, count=8)``: 8
sandboxes with its whole disk), applies one sampled edit in each and grades
it there (in parallel threads); if the best rollout beats its parent, it is
snapshotted and the search branches again from it, otherwise it backtracks
to the parent snapshot. Candidate code only ever runs inside a sandbox,
never on this machine. Each round's sandboxes are deleted at its end, the
snapshots at the end of the search.

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
from contextlib import ExitStack
from typing import Dict, List, Optional, Set

try:
    from warren import Sandbox, Snapshot
except ImportError:  # run from a checkout without installing the SDK
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from warren import Sandbox, Snapshot

WORKSPACE = "/root/work"
SOLUTION = WORKSPACE + "/solution.py"
HISTORY = WORKSPACE + "/history.log"
ROLLOUTS = 8
MAX_ROUNDS = 20
SEED = 7
LABELS = {"example": "tree_search"}

# The hidden tests: the grader knows the digits, the policy does not.
GRADER = r'''
import importlib.util, json, sys
# No bytecode cache: a fork copies the whole disk, and an edit that keeps
# the file's size within the same second would be graded from the parent's
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


class Grade:
    """A rollout's reward: the tests passed and failed, and the edit that
    made it."""

    def __init__(self, passed: int, total: int, failed: List[int], edit: Optional[Dict[int, int]] = None) -> None:
        self.passed, self.total, self.failed = passed, total, failed
        self.edit = edit or {}


def grade(sb: Sandbox, edit: Optional[Dict[int, int]] = None) -> Grade:
    """Run the hidden tests against the sandbox's candidate program."""
    out = json.loads(sb.exec(["python3", "/opt/grader/grade.py"], timeout=60).check().stdout)
    return Grade(out["passed"], out["total"], out["failed"], edit)


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
    sb.files.write(HISTORY, sb.files.read_text(HISTORY) + json.dumps(edit, sort_keys=True) + "\n")


def policy(parent: Grade, wrong: Dict[int, Set[int]], round_no: int, index: int) -> Dict[int, int]:
    """One sample of the policy: a new guess for every failing test, never
    one known wrong."""
    rng = random.Random(SEED * 100003 + round_no * 101 + index)
    return {i: rng.choice([v for v in range(10) if v not in wrong[i]]) for i in parent.failed}


def rollout(sb: Sandbox, edit: Dict[int, int]) -> Grade:
    """Apply an edit in a forked sandbox and grade the result."""
    apply_edit(sb, edit)
    return grade(sb, edit)


def main() -> None:
    """Search until every test passes (or MAX_ROUNDS), printing each round."""
    snapshots: List[Snapshot] = []  # the tree's nodes, deleted at the end
    try:
        with Sandbox.create(timeout=600, metadata=LABELS) as root:
            root.files.write("/opt/grader/grade.py", GRADER)
            root.files.write(SOLUTION, INITIAL_SOLUTION)
            root.files.write(HISTORY, "")
            best = grade(root)
            best_snap = root.snapshot()  # the root of the tree outlives its sandbox
            snapshots.append(best_snap)
        wrong: Dict[int, Set[int]] = {i: set() for i in range(best.total)}
        rounds = 0
        print(f"round 0: {best.passed}/{best.total} tests pass", flush=True)
        with ThreadPoolExecutor(max_workers=ROLLOUTS) as pool:
            while best.passed < best.total and rounds < MAX_ROUNDS:
                rounds += 1
                edits = [policy(best, wrong, rounds, i) for i in range(ROLLOUTS)]
                with ExitStack() as stack:  # deletes the round's sandboxes at its end
                    kids = [stack.enter_context(sb) for sb in
                            Sandbox.restore(best_snap, count=ROLLOUTS, timeout=600, metadata=LABELS)]
                    grades = list(pool.map(rollout, kids, edits))
                    # Learn from every rollout's reward which guesses are wrong.
                    for g in grades:
                        for i, v in g.edit.items():
                            if i in g.failed:
                                wrong[i].add(v)
                    w = max(range(ROLLOUTS), key=lambda k: grades[k].passed)  # the first of the best
                    if grades[w].passed > best.passed:
                        best, best_snap = grades[w], kids[w].snapshot()
                        snapshots.append(best_snap)
                        verdict = "branch from the best rollout"
                    else:
                        verdict = "no rollout improved: backtrack to the parent"
                rewards = [g.passed for g in grades]
                print(f"round {rounds}: rewards {rewards}, best {best.passed}/{best.total}: {verdict}", flush=True)
        # The winning branch lives on as a snapshot: read its files in a fork.
        with Sandbox.restore(best_snap)[0] as final:
            solution = final.files.read_text(SOLUTION)
            history = final.files.read_text(HISTORY).splitlines()
        print(TABLE_LINE.search(solution).group(0))  # type: ignore[union-attr]
        word = "solved" if best.passed == best.total else "not solved"
        print(
            f"{word}: {best.passed}/{best.total} tests pass after {rounds} rounds "
            f"({rounds * ROLLOUTS} rollouts forked from {len(snapshots)} snapshots, "
            f"{len(history)} edits on the winning branch)",
            flush=True,
        )
    finally:
        for sn in snapshots:
            sn.delete()
    if best.passed != best.total:
        sys.exit(1)


if __name__ == "__main__":
    main()
