"""The server's memory budget: what a click would add to the process's memory, checked before it runs.

    memory_budget.check_model_load("gemma3")         # ModelLoadError: one sentence, past the budget
    used, budget = memory_budget.headroom()          # kvviz.ui.live_lessons refuses a lesson past it

A class server serves every tab from one process. Loading a model adds its weights (a copy per model: kvviz.ui.
common keeps one); a lesson adds its engine's pool of blocks. Past the budget, a click is refused in a sentence
that says what is held and what to do, and nothing is loaded. KVVIZ_MEMORY_GIB sets the budget in GiB; by
default it is BUDGET_SHARE of the machine's memory. Memory in use is the process's resident set (Linux's
/proc/self/status), so whatever the process holds counts: models, lessons, rooms, Python itself.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from kvviz.hub.fetch import PACKAGED, fetched_folder
from kvviz.models import BUNDLED_DIR, ModelLoadError

BUDGET_VARIABLE = "KVVIZ_MEMORY_GIB"
BUDGET_SHARE = 0.8  # of the machine's memory, when KVVIZ_MEMORY_GIB is not set
GiB = 2**30


def machine_bytes() -> int:
    """The machine's memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def budget_bytes() -> int:
    """The most this process may hold: KVVIZ_MEMORY_GIB when it is a number above zero, else BUDGET_SHARE of the
    machine's memory."""
    try:
        gib = float(os.environ.get(BUDGET_VARIABLE, ""))
        if gib > 0:
            return int(gib * GiB)
    except ValueError:
        pass
    return int(BUDGET_SHARE * machine_bytes())


def resident_bytes() -> int:
    """What this process holds now (its resident set); its peak where /proc is not there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def model_bytes(source: str) -> int:
    """The weights a load of `source` reads, from their files on disk (0 when they are not found there: a built
    tiny model, or a source the load itself refuses)."""
    if source == "bundled":
        folder = BUNDLED_DIR
    elif source in PACKAGED:
        folder = fetched_folder(source)
    else:
        folder = Path(source).expanduser() if source.startswith((".", "/", "~")) else None
    if folder is None or not Path(folder).is_dir():
        return 0
    return sum(path.stat().st_size for path in Path(folder).glob("*.safetensors"))


def headroom() -> tuple[int, int]:
    """(bytes in use, the budget)."""
    return resident_bytes(), budget_bytes()


def refusal(adds: int, what: str, advice: str) -> str | None:
    """The sentence refusing `what`, which would add `adds` bytes, when it would take the process past the budget."""
    used, budget = headroom()
    if used + adds <= budget:
        return None
    return (f"{what} would add about {adds / GiB:,.2f} GiB to this server's memory, past its budget "
            f"({used / GiB:,.1f} of {budget / GiB:,.1f} GiB in use, {BUDGET_VARIABLE}); {advice}.")


def check_model_load(source: str) -> None:
    """ModelLoadError (one sentence) when loading `source` would take the process past the budget. The bundled
    model (10 MB) always loads: it is every session's fallback."""
    if source == "bundled":
        return
    said = refusal(model_bytes(source), f"Loading {source[:80]!r}",
                   "use a model already loaded here, or ask again when fewer lessons run")
    if said:
        raise ModelLoadError(said)
