"""The Speculative lesson's stage data (kvviz/lessons/speculative/stage.py) against the engine's
records: the cache per pass, the drafts and the verdict, the rolled-back slots and the freed blocks."""

import pytest

from kvviz.lessons.speculative.file import export_speculative, import_speculative
from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson
from kvviz.lessons.speculative.stage import held_blocks, stage_data

BLOCK_SIZE = 4


@pytest.fixture(scope="module")
def run(bundled):
    """The page's defaults: the refrain gives accepted drafts, and one pass rejects them all."""
    lesson = SpeculativeLesson.start(bundled, DEFAULT_PROMPT, 4, 48, BLOCK_SIZE)
    while lesson.step():
        pass
    return lesson


def test_each_pass_shows_the_records_cache_drafts_and_rollback(run):
    data = stage_data(run, 0)
    steps = data["steps"]
    assert len(steps) == len(run.records) and (data["step_word"], data["count_from"]) == ("Pass", 1)
    assert data["tokens"] == [run.decode([t]) for t in run.prompt_token_ids + run.output(len(run.records))]
    for row, record, shown in zip(run.draft_steps(), run.records, steps):
        state = record.requests[0]
        assert shown["num_tokens"] == state.num_computed_tokens
        assert shown["block_table"] == held_blocks(record)[0]
        assert len(shown["block_table"]) == -(-state.num_computed_tokens // BLOCK_SIZE)
        drafts = shown["drafts"]
        if not row.draft_token_ids:
            assert drafts is None
            continue
        draft = record.drafts[0]
        assert drafts["tokens"] == [run.decode([t]) for t in draft.draft_token_ids]
        assert drafts["accepted"] == draft.num_accepted and drafts["freed_blocks"] == draft.freed_block_ids
        assert [divmod(slot, BLOCK_SIZE) for slot in draft.rolled_back_slots] == [
            (r["block"], r["offset"]) for r in drafts["rolled_back"]]
        # each rejected draft's slot is where its position lives: its block in the table, or a freed one
        table = shown["block_table"] + drafts["freed_blocks"]
        for rolled in drafts["rolled_back"]:
            position = drafts["positions"][rolled["draft"]]
            assert (table[position // BLOCK_SIZE], position % BLOCK_SIZE) == (rolled["block"], rolled["offset"])
            assert rolled["draft"] >= drafts["accepted"]
        # the accepted drafts are in the cache after the pass, the model's own token is not yet
        assert all(p < shown["num_tokens"] for p in drafts["positions"][:drafts["accepted"]])
        assert shown["new"] == list(range(drafts["positions"][0] - 1, shown["num_tokens"]))
    assert sum(len(s["drafts"]["rolled_back"]) for s in steps if s["drafts"]) == \
        sum(len(d.rolled_back_slots) for r in run.records for d in r.drafts) > 0
    assert steps[-1]["summary"] == {key: value for key, value in run.summary(len(run.records) - 1).items()
                                    if key in steps[-1]["summary"]}


def test_the_sentence_says_the_verdict_and_the_rollback(run):
    steps = stage_data(run, 0)["steps"]
    assert steps[0]["sentence"].startswith(f"The prefill: all {len(run.prompt_token_ids)} prompt tokens")
    emptied = next(i for i, row in enumerate(run.draft_steps()) if row.freed_block_ids)
    row = run.draft_steps()[emptied]
    text = steps[emptied]["sentence"]
    assert f"The {len(row.rolled_back_slots)} rejected drafts' cache slots were rolled back" in text
    assert f"block {row.freed_block_ids[0]}, left empty, went back to the pool" in text
    kept = len(row.added_token_ids)
    assert f"so the pass kept {kept} token{'s' if kept > 1 else ''}." in text
    assert steps[-1]["note"] and "finished" in steps[-1]["note"]  # its table is the one it held


def test_each_pass_is_built_once_and_a_replay_builds_the_same(run):
    built = stage_data(run, 2)["steps"]
    assert all(a is b for a, b in zip(built, stage_data(run, 4)["steps"]))
    replayed, _ = import_speculative(export_speculative(run, 0))
    assert stage_data(replayed, 3) == stage_data(run, 3)
