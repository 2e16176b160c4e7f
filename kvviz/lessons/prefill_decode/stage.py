"""The Prefill and decode lesson as the stage draws it (kvviz.ui.stage): every step, built once.

    data = stage_data(lesson, step=3, presenter=False)

Everything comes from the lesson's records and traces: the tokens, the newest token's attention,
the request's block table and the bill of each step; the page says the step's sentence. A step's
data does not change once it ran, so it is built once per step and kept on the lesson
(`lesson.stage_steps`).
"""

from __future__ import annotations

import numpy as np

from kvviz.engine.layer_groups import layer_windows
from kvviz.engine.chat import special_token_ids
from kvviz.lessons.prefill_decode.logic import per_token_formula


BAND_LAYERS = 6  # layers drawn whole on one 1280x720 screen; a deeper model's others fold into a strip


def stage_data(lesson, step: int, presenter: bool = False) -> dict:
    """The stage's data for the steps this lesson has shown so far (a replay: every recorded step)."""
    info = lesson.model_info
    records = lesson.records if lesson.replay else lesson.visible_records
    cache = lesson.stage_steps
    while len(cache) < len(records):
        cache.append(_step(lesson, len(cache)))
    steps = cache[:len(records)]
    per_token = steps[0]["bill"]["bytes_per_token"]
    shown = steps[-1]["num_tokens"] + (1 if steps[-1]["sampled"] else 0)
    return {"tokens": lesson.token_texts[:shown], "prompt_tokens": len(lesson.prompt_token_ids),
            "special": special_positions(lesson, shown),
            "layers": info["layers"], "band_layers": min(info["layers"], BAND_LAYERS), "heads": info["heads"],
            "head_groups": head_groups(info),
            "block_size": lesson.settings.block_size,
            "num_blocks": lesson.engine.num_blocks if lesson.engine is not None else _pool_blocks(lesson, records),
            "bytes_per_token": per_token,
            "per_token_formula": per_token_formula(info),
            "presenter": presenter, "step": min(step, len(steps) - 1), "steps": steps,
            "last_step": lesson.last_step(), "asked_last_step": lesson.settings.sampling.max_tokens - 1,
            "windows": layer_windows_of(lesson)}


def layer_windows_of(lesson) -> list[int | None] | None:
    """Each layer's sliding window (None: full attention) where one layer has one: the stage greys the
    positions a sliding layer has given back. None for a model without (a replay: its file's summary)."""
    if lesson.engine is not None:
        windows = layer_windows(lesson.engine.hf_config)
    else:
        kinds, window = lesson.model_info.get("layer_types"), lesson.model_info.get("sliding_window")
        windows = [window if kind == "sliding_attention" else None for kind in kinds or []]
    return windows if any(w is not None for w in windows) else None


def head_groups(info: dict) -> list[list[int]]:
    """The query heads each KV head serves, KV head by KV head: [[0, 1, 2], [3, 4, 5], [6, 7, 8]] for
    9 query heads over 3 KV heads (GQA); one head each for MHA; all heads in one group for MQA and MLA."""
    heads = info["heads"]
    kv_heads = 1 if info.get("kv_lora_rank") else info.get("kv_heads") or heads  # MLA: one latent row for all
    share = heads // kv_heads if kv_heads and heads % kv_heads == 0 else 1
    return [list(range(g * share, (g + 1) * share)) for g in range(heads // share)]


def special_positions(lesson, shown: int) -> list[int]:
    """Positions of the tokenizer's special tokens (a chat template's `<|im_start|>`, `<|im_end|>`),
    drawn as chips of their own kind; none in a replay, which has no tokenizer."""
    if lesson.tokenizer is None:
        return []
    special = special_token_ids(lesson.tokenizer)
    ids = list(lesson.prompt_token_ids) + [token for record in lesson.records for _, token in record.sampled]
    return [position for position, token in enumerate(ids[:shown]) if token in special]


def _step(lesson, step: int) -> dict:
    record = lesson.records[step]
    num_tokens = lesson.num_tokens_at(step)
    before = lesson.num_tokens_at(step - 1) if step else 0
    attention = np.asarray(lesson.traces[step].attention)[:, :, :num_tokens]  # (layers, heads, tokens)
    bill = lesson.bill(step, lesson.model_info["dtype_bytes"])
    blocks, _, returned = lesson.held(step)
    note = (f"Finished: its {bill['blocks']} blocks went back to the pool{'s' if bill['group_blocks'] else ''}; "
            "the figures are what it held." if returned else None)
    return {"num_tokens": num_tokens, "new": list(range(before, num_tokens)), "sampled": bool(record.sampled),
            "attention": np.rint(attention * 255).clip(0, 255).astype(int).tolist(),
            "block_table": blocks, "groups": layer_groups(lesson, step),
            "bill": {"formula_bytes": bill["formula_bytes"], "token_bytes": bill["token_bytes"],
                     "blocks": bill["blocks"], "group_blocks": bill["group_blocks"], "block_bytes": bill["block_bytes"],
                     "slack_bytes": bill["slack_bytes"],
                     "bytes_per_token": bill["bytes_per_token"], "note": note,
                     "formula": bill["formula"] if len(bill["formula"]) > 1 else []}}  # one line per kind of layer


def layer_groups(lesson, step: int) -> list[dict] | None:
    """A model with sliding layers keeps a block table per group of layers (engine/layer_groups.py): each group's
    name, layers, window, table (None where the window gave a block back), pool size, and the blocks its window
    gave back in this step. None for a model whose layers all keep every position."""
    record = lesson.records[step]
    tables = lesson.group_tables(step)
    if len(record.layer_groups) < 2 or not tables:
        return None
    given_back = lesson.given_back(step)
    return [{"name": group.name, "layers": len(group.layers), "window": group.window, "pool": group.num_blocks,
             "given_back": given_back if group.window else 0,
             "table": list(tables[g]) if g < len(tables) else [],
             "slid": sorted({block for event in record.events if event.kind == "slide" and event.group == g
                             for block in event.block_ids})}
            for g, group in enumerate(record.layer_groups)]


def _pool_blocks(lesson, records) -> int:
    """A replay has no engine: the pool's size from its bytes."""
    memory = records[0].memory
    block_bytes = memory.bytes_per_token * lesson.settings.block_size
    return max(1, memory.allocated_bytes // block_bytes) if block_bytes else 1
