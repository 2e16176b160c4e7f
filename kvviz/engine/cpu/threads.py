"""How many threads the engine's CPU work runs on: the cores that the rest of the machine leaves free.

    cpu_share.apply()                # in Engine.step: this thread's torch (and kernels) on the free cores
    with cpu_share.capped(1): ...    # a measurement that leaves a core to the browser
    cpu_share.describe()             # "2 of 2 cores (others used 0.1 cores)"

Why: a step of a small model runs hundreds of OpenMP parallel regions (torch's and kvviz's kernels',
one runtime). At the end of each, a thread that is done spins, waiting for the others. When another
process holds the core a waiting-for thread needs, the region lasts until the scheduler hands that
core back: on a 2-core AMD EPYC, the bench's workload on the bundled model took 1.30 s quiet on two
threads and 4.54 s beside one busy-loop process (29% of its speed), but 1.91 s on one thread beside
the same process (68%, one core's worth). Shorter spins (GOMP_SPINCOUNT 1,000-50,000) or passive
waiting cost 0.3-1.4x of the quiet speed and still lost to one thread under load.

So every quarter second of stepping, the share reads how much CPU the machine spent (/proc/stat) less
what this process spent (/proc/self/stat), and runs on the cores left: every core on a quiet machine,
one fewer for each core's worth of other work. torch's thread count is per calling thread under
OpenMP, so `apply` sets it in the thread that is about to step.

A server's operator can fix the count instead: KVVIZ_THREADS=N (N threads always) or KVVIZ_THREADS=auto
(the default); OMP_NUM_THREADS, when set, is the most it uses.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass

import torch

SAMPLE_EVERY_S = 0.25  # how often the share looks again, while an engine steps
STALE_AFTER_S = 2.0  # a longer gap since the last look (the engine idle) starts a fresh measurement
MARGIN = 0.4  # a thread runs where at least 0.6 of a core is free: measured 2 threads beat 1 beside ~0.3 cores of work


def threads_for(free_cores: float, ceiling: int) -> int:
    """Threads for this many free cores: n threads once n - MARGIN cores are free, at least one."""
    return max(1, min(ceiling, int(free_cores + MARGIN)))


@dataclass(slots=True)
class CpuTimes:
    """Clock ticks (USER_HZ) read at one moment: the machine's busy and total, this process's own."""

    busy: int  # every CPU's non-idle ticks (user, nice, system, irq, softirq, steal)
    total: int  # every CPU's ticks
    own: int  # this process's user + system ticks
    num_cpus: int

    @classmethod
    def read(cls) -> CpuTimes | None:
        """Now, from /proc; None where there is no /proc (not Linux) or it cannot be read."""
        try:
            with open("/proc/stat") as stat:
                lines = stat.read().splitlines()
            with open("/proc/self/stat") as own:
                fields = own.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except OSError:
            return None
        ticks = [int(value) for value in lines[0].split()[1:9]]  # user nice system idle iowait irq softirq steal
        idle = ticks[3] + ticks[4]
        num_cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        return cls(busy=sum(ticks) - idle, total=sum(ticks), own=int(fields[11]) + int(fields[12]),
                   num_cpus=max(1, num_cpus))

    def others_since(self, before: CpuTimes) -> float | None:
        """Cores' worth of work done by other processes between `before` and now; None if too short."""
        elapsed = (self.total - before.total) / self.num_cpus  # ticks per CPU
        if elapsed < 10:  # under 0.1 s at 100 ticks a second: too coarse to tell
            return None
        others = (self.busy - before.busy) - (self.own - before.own)
        return max(0.0, others / elapsed)


class CpuShare:
    """The process-wide thread policy (one per process: torch's threads are one pool)."""

    def __init__(self, fixed: int | None = None, ceiling: int | None = None):
        self._lock = threading.Lock()
        self._fixed, self._ceiling = fixed, ceiling
        self._configured = False
        self._last: CpuTimes | None = None
        self._last_at = 0.0
        self.others = 0.0  # cores' worth of other processes' work in the last measurement
        self.threads = 0  # the count chosen; 0 until the first apply
        self._caps: list[int] = []

    def _configure(self) -> None:
        """Read the operator's settings once, on first use (the tests set OMP_NUM_THREADS after import)."""
        if self._configured:
            return
        setting = os.environ.get("KVVIZ_THREADS", "auto").strip().lower()
        if self._fixed is None and setting.isdigit() and int(setting) > 0:
            self._fixed = int(setting)
        if self._ceiling is None:
            omp = os.environ.get("OMP_NUM_THREADS", "").strip()
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            self._ceiling = int(omp) if omp.isdigit() and int(omp) > 0 else cores
        self.threads = self._fixed or self._ceiling
        self._configured = True

    @property
    def ceiling(self) -> int:
        with self._lock:
            self._configure()
            return self._ceiling

    def choose(self) -> int:
        """The thread count for a step starting now, measuring again when a quarter second has passed."""
        with self._lock:
            self._configure()
            if self._fixed:
                return min(self._fixed, *self._caps) if self._caps else self._fixed
            now = time.monotonic()
            if now - self._last_at >= SAMPLE_EVERY_S:
                times = CpuTimes.read()
                if times is not None and self._last is not None and now - self._last_at <= STALE_AFTER_S:
                    others = times.others_since(self._last)
                    if others is not None:
                        self.others = others
                        self.threads = threads_for(min(self._ceiling, times.num_cpus) - others, self._ceiling)
                self._last, self._last_at = times, now
            return min(self.threads, *self._caps) if self._caps else self.threads

    def apply(self) -> int:
        """Set the calling thread's torch thread count (which kvviz's kernels follow) to `choose()`."""
        threads = self.choose()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return threads

    @contextlib.contextmanager
    def capped(self, most: int):
        """At most `most` threads for the steps run inside, whatever is free (overlapping caps: the least)."""
        with self._lock:
            self._caps.append(max(1, most))
        self.apply()  # timings taken inside, outside any engine step, run capped too
        try:
            yield
        finally:
            with self._lock:
                self._caps.remove(max(1, most))
            self.apply()

    def describe(self) -> str:
        with self._lock:
            self._configure()
            if self._fixed:
                return f"{self._fixed} threads (KVVIZ_THREADS)"
            return f"{self.threads} of {self._ceiling} threads (other processes used {self.others:.1f} cores)"


cpu_share = CpuShare()
