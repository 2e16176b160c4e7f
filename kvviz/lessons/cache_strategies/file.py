"""Export the "Cache strategies" lesson to JSON and replay it without a model.

A file holds what the comparison was asked (the prompt and the page's settings), every
strategy's StrategyComparison, the text pieces of its tokens and the 8-bit caches' bytes per token
(`eight_bit`, EightBitRow; a file written before it replays without that table). Everything the comparison tabs
draw comes from these. A file is untrusted: each field is checked for type, range and agreement
with the others (one entry per step, one piece per token) before anything is built, and a
refusal is one sentence naming the field (kvviz/lessons/files.py).
"""

from __future__ import annotations

import json
import typing
from dataclasses import asdict

from kvviz.lessons.cache_strategies.logic import EightBitRow, StrategyComparison
from kvviz.lessons.files import (
    LESSON_FORMAT,
    FieldError,
    bounded_list,
    build_checked,
    check_keys,
    check_range,
    read_lesson_file,
    settings_numbers,
    typed,
)
from kvviz.strategies.bill import ByteBill, ByteItem
from kvviz.strategies.options import STRATEGIES

LESSON_KEY = "cache_strategies"
MAX_RESULTS = 64  # the page compares 7 strategies
MAX_STEPS = 4096  # per strategy: the page's slider stops at 128 tokens
MAX_LAYERS = 1024
MAX_DIFFERENCES = 64
FIELDS = {"format", "lesson", "model_name", "prompt", "settings", "results", "pieces"}
EIGHT_BIT = "eight_bit"  # optional: files written before it replay without the 8-bit table
MAX_EIGHT_BIT = 16  # the page measures 4 rows
SETTINGS = {"max_tokens": MAX_STEPS, "window": MAX_STEPS, "group_size": 4096, "residual": MAX_STEPS,
            "timing_runs": 100}  # name -> most; residual is checked from 0 below
PER_STEP = ("kl", "max_key_error", "max_value_error", "held_bytes", "predicted_bytes", "forward_s", "tokens_run")


def export_strategies(comparison: dict) -> str:
    """The comparison (the page's lesson: model, prompt, settings, results, pieces) as JSON: no code,
    no pickle, no model."""
    return json.dumps({
        "format": LESSON_FORMAT, "lesson": LESSON_KEY, "model_name": comparison["model"],
        "prompt": comparison["prompt"],
        "settings": comparison["settings"], "results": [r.to_dict() for r in comparison["results"]],
        "pieces": [row["pieces"] for row in comparison["texts"]],
        EIGHT_BIT: [asdict(row) for row in comparison["eight_bit"]],
    })


def import_strategies(data: bytes | str) -> dict:
    """A replay of `export_strategies` output: model_name, prompt, settings, results and pieces,
    checking everything first."""
    return build_checked(_build, read_lesson_file(data, LESSON_KEY))


def _build(payload: dict) -> dict:
    check_keys(payload, "", FIELDS | {EIGHT_BIT}, FIELDS)
    settings = _settings(payload["settings"])
    items = bounded_list(payload["results"], MAX_RESULTS, "results")
    check_range(len(items), 1, MAX_RESULTS, "results (the number of strategies)")
    results = [_comparison(item, f"results[{i}]", reference=i == 0) for i, item in enumerate(items)]
    pieces = bounded_list(payload["pieces"], len(results), "pieces")
    if len(pieces) != len(results):
        raise FieldError("pieces", f"has {len(pieces)} texts where results has {len(results)}")
    for i, (text, result) in enumerate(zip(pieces, results)):
        if len(bounded_list(text, MAX_STEPS, f"pieces[{i}]")) != len(result.token_ids):
            raise FieldError(f"pieces[{i}]", f"has {len(text)} pieces where results[{i}] has "
                                             f"{len(result.token_ids)} tokens")
    return {"model_name": typed(payload["model_name"], str, "model_name")[:200],
            "prompt": typed(payload["prompt"], str, "prompt"), "settings": settings, "results": results,
            "pieces": [typed(text, list[str], f"pieces[{i}]") for i, text in enumerate(pieces)],
            "eight_bit": [typed(row, EightBitRow, f"{EIGHT_BIT}[{i}]")
                          for i, row in enumerate(bounded_list(payload.get(EIGHT_BIT, []), MAX_EIGHT_BIT, EIGHT_BIT))]}


def _settings(value) -> dict:
    numbers, settings = settings_numbers(value, {k: v for k, v in SETTINGS.items() if k != "residual"}, {"residual"})
    numbers["residual"] = check_range(typed(settings["residual"], int, "settings.residual"), 0, MAX_STEPS,
                                      "settings.residual")
    return {name: numbers[name] for name in SETTINGS}


def _comparison(value, where: str, reference: bool) -> StrategyComparison:
    """One strategy's results: per-step lists of one length, checked by length before their items.
    reference: the first result, the full cache every other is measured against."""
    value = typed(value, dict, where)
    hints = typing.get_type_hints(StrategyComparison)
    check_keys(value, where, set(hints))
    fields = {name: bounded_list(value[name], MAX_STEPS, f"{where}.{name}")
              for name in ("token_ids", "decode_ms", *PER_STEP)}
    steps = len(fields["kl"])
    check_range(steps, 1, MAX_STEPS, f"{where}.kl (the number of steps)")
    check_range(len(fields["decode_ms"]), 1, MAX_STEPS, f"{where}.decode_ms (the number of timed runs)")
    for name in PER_STEP:
        if len(fields[name]) != steps:
            raise FieldError(f"{where}.{name}", f"has {len(fields[name])} steps where kl has {steps}")
    checked = {name: typed(item, hints[name], f"{where}.{name}") for name, item in value.items()
               if name not in ("final_bill", "options")}
    if checked["strategy"] not in STRATEGIES:
        raise FieldError(f"{where}.strategy", "names no kvviz strategy")
    if reference and checked["strategy"] != "dynamic":
        raise FieldError(f"{where}.strategy", "must be dynamic (the full cache every other is measured against)")
    checked["options"] = _options(value["options"], checked["strategy"], f"{where}.options")
    checked["final_bill"] = _bill(value["final_bill"], f"{where}.final_bill")
    return StrategyComparison(**checked)


def _options(value, strategy: str, where: str) -> dict:
    """A strategy's resolved options: every option it takes (the page reads each), as whole numbers
    from 1 up (a residual of recent tokens from 0), int4 or int8."""
    value = typed(value, dict, where)
    check_keys(value, where, set(STRATEGIES[strategy]), set())
    options = {name: check_range(typed(number, int, f"{where}.{name}"), 0 if name == "residual" else 1, 2**53 - 1,
                                 f"{where}.{name}")
               for name, number in value.items()}
    check_keys(value, where, set(STRATEGIES[strategy]))  # then the missing ones (a KeyError on the page before)
    if options.get("bits", 8) not in (4, 8):
        raise FieldError(f"{where}.bits", "must be 4 or 8")
    return options


def _bill(value, where: str) -> ByteBill:
    """The last step's bill: its differences may be negative (bytes the strategy holds fewer of)."""
    value = typed(value, dict, where)
    check_keys(value, where, {"measured_bytes", "layer_bytes", "formula_bytes", "predicted_bytes", "differences"})
    layers = typed(bounded_list(value["layer_bytes"], MAX_LAYERS, f"{where}.layer_bytes"), list[int],
                   f"{where}.layer_bytes")
    differences = []
    for i, item in enumerate(bounded_list(value["differences"], MAX_DIFFERENCES, f"{where}.differences")):
        item = typed(item, dict, f"{where}.differences[{i}]")
        check_keys(item, f"{where}.differences[{i}]", {"name", "num_bytes"})
        differences.append(ByteItem(typed(item["name"], str, f"{where}.differences[{i}].name"),
                                    _signed(item["num_bytes"], f"{where}.differences[{i}].num_bytes")))
    number = lambda name: typed(value[name], int, f"{where}.{name}")  # noqa: E731
    bill = ByteBill(number("measured_bytes"), layers, number("formula_bytes"), number("predicted_bytes"), differences)
    if bill.formula_bytes + sum(d.num_bytes for d in differences) != bill.measured_bytes:
        raise FieldError(f"{where}.differences", "do not add up from formula_bytes to measured_bytes")
    return bill


def _signed(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -2**53 < value < 2**53:
        raise FieldError(where, "must be a whole number")
    return value
