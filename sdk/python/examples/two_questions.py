"""The talk's two questions, answered by running code instead of guessing.

A language model asked "what is 3 + 3?" or "how many r's are in
strawberry?" may answer from memory, and get the second one wrong. Given a
computer, it can run code and read off the answer. Here each question comes
with the code a model would write for it, run with python3 in a fresh warren
sandbox. Prints the two answers, one a line: 6, then 3.

Run against a warren server (WARREN_URL and WARREN_API_KEY, or a local
server's admin key)::

    python3 sdk/python/examples/two_questions.py
"""

from __future__ import annotations

import os
import sys

try:
    from warren import Sandbox
except ImportError:  # run from a checkout without installing the SDK
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from warren import Sandbox

# Each question, and the code a model would write to answer it.
QUESTIONS = [
    ("What is 3 + 3?", "print(3 + 3)"),
    ('How many r\'s are in "strawberry"?', 'print("strawberry".count("r"))'),
]


def main() -> None:
    """Answer each question by running its code in one sandbox."""
    with Sandbox.create(timeout=300, metadata={"example": "two_questions"}) as sb:
        for _question, code in QUESTIONS:
            result = sb.exec(["python3", "-c", code], timeout=60).check()
            print(result.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
