"""Session state and button callbacks of the "Cache strategies" lesson.

Results and errors live in st.session_state under KEYS (they go when another model
loads); widgets under "strategies_*", which stay. Nothing
runs on a widget change, only on the buttons: a comparison runs the model 29 times (the full cache's
reference, then per strategy a teacher-forced run, a free run and two more timed runs), under a
progress bar and a Stop button that keeps what was measured.
The comparison is plain data (`comparison`), so it exports, and a replayed file draws the same tabs
with no model (kvviz/lessons/cache_strategies/file.py).
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from kvviz.lessons.cache_strategies.figures import strategy_color
from kvviz.lessons.cache_strategies.file import export_strategies, import_strategies
from kvviz.lessons.cache_strategies.gqa import gqa_report
from kvviz.lessons.cache_strategies.logic import (
    EightBitRow,
    StrategyComparison,
    compare_strategies,
    comparison_seconds,
    comparison_table,
    eight_bit_rows,
    lesson_specs,
)
from kvviz.lessons.budget import click_seconds, says, tokens_that_fit
from kvviz.ui.common import current_model
from kvviz.ui.session_keys import Keys, SessionState, Slot
from kvviz.ui.progress import estimated_bar, how_it_stopped

# longer than the default window (24) on every model here (41-44 tokens): the sliding window drops tokens from
# the prefill on, whatever number of tokens one click's budget leaves to generate
EXAMPLE_PROMPT = ("ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
                  "Arise, fair sun, and kill the envious moon,")


class StrategiesState(SessionState):
    """What the Cache strategies page keeps; a comparison's results go when another model loads."""

    run = Slot("strategies_run", clears=True)  # the comparison on screen (measured or replayed)
    gqa_run = Slot("strategies_gqa_run", clears=True)  # the GQA tab's report
    error = Slot("strategies_error", clears=True)  # one sentence each
    gqa_error = Slot("strategies_gqa_error", clears=True)
    upload_error = Slot("strategies_upload_error", clears=True)
    running = Slot("strategies_running", clears=True)  # the strategies measured by a comparison under way
    stopped = Slot("strategies_stopped", clears=True)  # what a stopped comparison kept: one sentence
    note = Slot("strategies_note", clears=True)  # fewer tokens than asked, or a window that never fills
    gqa_heads = Slot("strategies_gqa_heads", default=1)  # the GQA tab's KV heads
    group_size = Slot("strategies_group_size")  # the quantization group widget


STRATEGIES = StrategiesState()
KEYS = Keys(clears=StrategiesState.cleared_keys())
DEFAULTS = {"strategies_prompt": EXAMPLE_PROMPT, "strategies_max_tokens": 32, "strategies_window": 24,
            "strategies_group_size": 32, "strategies_residual": 0}


TIMING_RUNS = 3  # free runs timed per strategy: the Time tab shows their median and spread


def group_sizes(head_dim: int) -> list[int]:
    """Quantization group sizes that fit this head size: even, dividing it."""
    return [g for g in (4, 8, 16, 32, 64, 128, 256) if g <= head_dim and head_dim % g == 0] or [head_dim]


def gqa_choices(kv_heads: int) -> list[int]:
    """KV head counts mean-pooling can reach: the divisors of kv_heads below it (1 is MQA)."""
    return [n for n in range(1, kv_heads) if kv_heads % n == 0]


def setting(key: str):
    return st.session_state.get(key, DEFAULTS[key])


def strategies() -> dict | None:
    return STRATEGIES.run


def gqa() -> object | None:
    return STRATEGIES.gqa_run


def run(slot) -> None:
    """Compare every strategy on the prompt under a progress bar and a Stop button in `slot`; a bad setting
    leaves one sentence and the old results. It runs in the page's script, not in a callback, so that Stop
    (or any widget) interrupts it at the bar's next move, within one step; the strategies measured by then
    wait under "strategies_running" for the next run of the page (keep_a_stopped_run)."""
    STRATEGIES.drop("error", "stopped", "note")
    lm = current_model()
    prompt = str(setting("strategies_prompt"))
    if not prompt.strip():
        STRATEGIES.error = "The prompt is empty; type some text to start from."
        return
    settings = {name: int(setting(f"strategies_{name}"))
                for name in ("max_tokens", "window", "group_size", "residual")}
    specs = lesson_specs(settings["window"], settings["group_size"], settings["residual"], lm.max_context)
    settings["max_tokens"], note = tokens_that_fit(
        lambda tokens: comparison_seconds(lm, prompt, tokens, specs, TIMING_RUNS), settings["max_tokens"],
        "every strategy")  # a deep model at the page's defaults: the most tokens under one click's budget
    prompt_tokens = len(lm.tokenizer(prompt)["input_ids"]) if lm.tokenizer is not None else 0
    if prompt_tokens + settings["max_tokens"] <= settings["window"]:  # the window never fills: it would lie on dynamic
        note = " ".join(filter(None, [note, (
            f"The window of {settings['window']} tokens never fills in this run ({prompt_tokens} prompt tokens and "
            f"{settings['max_tokens']} generated), so the sliding window keeps every token, as the dynamic cache "
            f"does; choose a window under {prompt_tokens + settings['max_tokens']} or a longer prompt to see it "
            "drop the oldest.")]))
    if note:
        STRATEGIES.note = note
    bar = estimated_bar(slot, lambda: comparison_seconds(lm, prompt, settings["max_tokens"], specs, TIMING_RUNS),
                        says(next(lm.model.parameters()).device, "strategies"),
                        STRATEGIES.key("error"), "strategies_run_stop",
                        "Ends at the next step and keeps the strategies measured so far.", click_seconds())
    if bar is None:  # past the budget, or a prompt the model cannot take: one sentence
        return
    results = []
    STRATEGIES.running = {"results": results, "prompt": prompt, "settings": settings,
                                              "strategies": len(specs)}
    try:
        compare_strategies(lm, prompt, settings["max_tokens"], specs, TIMING_RUNS, results=results,
                           progress=lambda done, total, text: bar.move(done / total, text))
    except ValueError as error:  # EngineError is a ValueError too
        del STRATEGIES.running
        STRATEGIES.error = str(error)
        slot.empty()
        return
    del STRATEGIES.running  # ended, not stopped
    STRATEGIES.run = measured(lm, results, prompt, {**settings, "timing_runs": TIMING_RUNS})
    slot.empty()


def measured(lm, results: list[StrategyComparison], prompt: str, settings: dict) -> dict:
    """The comparison of `results`, measured just now on the loaded model, as the page keeps it."""
    decode = (lambda t: lm.tokenizer.decode([t])) if lm.tokenizer is not None else str
    pieces = [[decode(t) for t in r.token_ids] for r in results]
    return comparison(results, lm.name, prompt, settings, pieces,
                      eight_bit=eight_bit_rows(lm, settings["group_size"]))


def keep_a_stopped_run() -> None:
    """A comparison that a widget interrupted left the strategies it measured: keep them, and say in one
    sentence what was kept (nothing, when it stopped in the full cache's reference run)."""
    running = STRATEGIES.take("running")
    if running is None:
        return
    total = running["strategies"]
    if not running["results"]:
        shown = " The comparison below is the last one that finished." if strategies() is not None else ""
        STRATEGIES.stopped = (
            f"{how_it_stopped()} during the full cache's reference run, before any of the {total} strategies "
            f"was measured, so nothing new is kept.{shown}")
        return
    results = [replace(r, decode_ms=list(r.decode_ms)) for r in running["results"]]
    timed = sorted({len(r.decode_ms) for r in results})
    STRATEGIES.run = measured(current_model(), results, running["prompt"],
                                                     {**running["settings"], "timing_runs": timed[0]})
    if len(results) < total:
        names = ", ".join(r.label for r in results)
        said = (f"{how_it_stopped()} after {len(results)} of {total} strategies: the page keeps {names}, "
                "each timed once; press **Run every strategy** to measure them all.")
    else:
        times = "-".join(map(str, (timed[0], timed[-1]))) if len(timed) > 1 else str(timed[0])
        said = (f"{how_it_stopped()} during the extra timing runs: the page keeps all {total} strategies, each timed "
                f"{times} of {TIMING_RUNS} times, so the Time tab's spread is narrower than a full run's.")
    STRATEGIES.stopped = said


def stopped() -> str | None:
    return STRATEGIES.stopped


def comparison(results: list[StrategyComparison], model_name: str, prompt: str, settings: dict,
               pieces: list[list[str]], replay: bool = False, eight_bit: list[EightBitRow] = ()) -> dict:
    """What the page draws, all plain data: the results, their table, their texts (one piece per token) and
    the 8-bit caches' bytes per token (none from a file written before they were recorded)."""
    return {"results": results, "table": comparison_table(results), "model": model_name, "prompt": prompt,
            "settings": settings, "replay": replay, "eight_bit": list(eight_bit),
            "texts": [{"label": r.label, "color": strategy_color(r.strategy, r.options), "pieces": text,
                       "divergence": r.first_divergence} for r, text in zip(results, pieces)]}


class StrategiesFiles:
    """The comparison's lesson files: what makes the lesson replay (kvviz.lessons.lesson.Replays)."""

    file_name = "kvviz-cache-strategies.json"

    def export(self, comparison: dict) -> str:
        return export_strategies(comparison)

    def read_file(self, data: bytes) -> dict:
        """The comparison a lesson file holds, as the page keeps it for a replay (raises LessonFileError)."""
        return replayed(import_strategies(data))


FILES = StrategiesFiles()


def exporter():
    """A function giving the comparison as a lesson file; None before a comparison.
    Streamlit calls the function in a thread of its own when the button is clicked, where
    st.session_state cannot be read, so everything it needs is bound here."""
    current = strategies()
    return None if current is None else (lambda: FILES.export(current))


def replay(data: bytes) -> None:
    """Replay an uploaded comparison (raises LessonFileError, and then the current one stays)."""
    STRATEGIES.run = FILES.read_file(data)
    del STRATEGIES.error


def replayed(file: dict) -> dict:
    """The comparison a checked lesson file (import_strategies) holds, as the page keeps it for a replay."""
    return comparison(file["results"], file["model_name"], file["prompt"], file["settings"], file["pieces"],
                      replay=True, eight_bit=file["eight_bit"])


def on_leave_replay() -> None:
    del STRATEGIES.run


def replaying() -> bool:
    lesson = strategies()
    return lesson is not None and lesson["replay"]


def on_gqa() -> None:
    del STRATEGIES.gqa_error
    lm = current_model()
    try:
        report = gqa_report(lm, int(STRATEGIES.gqa_heads))
    except ValueError as error:
        STRATEGIES.gqa_error = str(error)
        return
    STRATEGIES.gqa_run = report
