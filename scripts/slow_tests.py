"""List the tests that keep the quick tier (bash scripts/test.sh --quick) from being quick: run everything that
needs neither a browser nor vLLM with pytest's timings, and write each test that took at least --least seconds
(setup, call and teardown together) to tests/slow_tests.txt, which tests/conftest.py reads to mark them `slow`.
They still run in the whole suite. Run it again when the quick tier grows past 2 minutes.

    python scripts/slow_tests.py [--least 0.8]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "slow_tests.txt"
TIMING = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--least", type=float, default=0.8, help="seconds a test takes to count as slow")
    args = parser.parse_args()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-m",
                          "not browser and not vllm", "--ignore=tests/browser", "--durations=0",
                          "--durations-min=0.05", "-p", "no:cacheprovider"],
                         cwd=ROOT, capture_output=True, text=True)
    seconds: dict[str, float] = defaultdict(float)
    for line in run.stdout.splitlines():
        found = TIMING.match(line.strip())
        if found:
            seconds[found.group(3)] += float(found.group(1))
    if run.returncode != 0 or not seconds:
        sys.exit(f"the quick tier did not pass (exit {run.returncode}); nothing written:\n{run.stdout[-3000:]}")
    slow = sorted(test for test, spent in seconds.items() if spent >= args.least)
    LIST.write_text("# written by scripts/slow_tests.py: tests of the quick tier that take at least "
                    f"{args.least:g} s here; tests/conftest.py marks them slow\n" + "\n".join(slow) + "\n")
    print(f"{len(slow)} of the quick tier's tests took at least {args.least:g} s "
          f"({sum(seconds[t] for t in slow):,.0f} of {sum(seconds.values()):,.0f} s); "
          f"written to {LIST.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
