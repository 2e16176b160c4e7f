"""Server time of one decode step on the "Prefill and decode" page (target: under 0.5 s).

    python scripts/bench_page.py --steps 30

Runs the real page in Streamlit's AppTest (the same script run a browser triggers, without the
network and the browser's drawing) and times each "Next token" click: engine step, no-cache
twin, records, and every figure of the page. Prints the median and the 95th percentile.
"""

import argparse
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    at.slider(key="lesson_max_tokens").set_value(args.steps + 2).run()
    start = time.perf_counter()
    next(b for b in at.button if b.label == "Prefill").click().run()
    prefill = time.perf_counter() - start
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        next(b for b in at.button if b.label == "Next token").click().run()
        times.append(time.perf_counter() - start)
    assert not at.exception, at.exception
    times.sort()
    lesson = at.session_state["lesson_run"]
    print(f"prompt tokens {len(lesson.prompt_token_ids)}, steps {args.steps}")
    print(f"prefill: {prefill:.3f} s")
    print(f"next token: median {statistics.median(times):.3f} s, p95 {times[int(0.95 * (len(times) - 1))]:.3f} s, "
          f"max {times[-1]:.3f} s (target: under 0.5 s)")


if __name__ == "__main__":
    main()
