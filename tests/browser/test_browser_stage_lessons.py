"""The stage (issue 24, item 3) on the Paged cache and batching and the Speculative decoding pages,
in a real browser at a projector's 1280x720, normal and presenter mode: after Start and a few
steps the diagram and its sentence are on the first screen; hovering a request or a block lights
its blocks everywhere; the smallest type; and the block tables, reference counts, drafts and
rollbacks the stage shows equal the engine's records, run here by the lesson's own logic. The
fork tab's stage splits a shared block at copy-on-write.

Screenshots go to docs/screenshots/ (kept in the repository, for people to look at).
"""

import re

import pytest
from playwright.sync_api import expect

from kvviz.ui.app_server import ROOT

from app_reads import no_exceptions
from chromium import (SLOW_S, browser_page, open_tab, press, run_finished, stage_caption, still,
    wait_drawn)
from lesson_steps import replay, start_and_step
from page_texts import SMALLEST_FONT_JS

SHOTS = ROOT / "docs" / "screenshots"
PAGED_STEPS = 8  # R4 arrives at step 8 and shares R1's prompt blocks: reference count 3
SPEC_STEPS = 5  # pass 6 rejects every draft: four slots rolled back, one block back to the pool
DRAWN_MS = 60_000  # steps the browser draws on its own: waited for, not timed (two browsers share a busy CI machine)


def open_stage(page, url, lesson, steps, presenter, shown, parts):
    """Start and step the lesson until the stage shows `shown`; keep a screenshot; check that the
    stage's `parts` are on the first screen and its smallest type; the stage's locator."""
    start_and_step(page, url, lesson, steps, presenter)
    stage_caption(page).get_by_text(shown).wait_for()
    no_exceptions(page)
    still(page)  # the animations end
    SHOTS.mkdir(parents=True, exist_ok=True)
    mode = "presenter" if presenter else "normal"
    page.screenshot(path=str(SHOTS / f"stage_{lesson.split('_')[0]}_{mode}_1280x720.png"))
    for selector in parts:
        box = page.locator(selector).first.bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= 720, (selector, box)  # no scrolling
    stage = page.locator("[data-testid='kvviz-stage']")
    smallest = stage.evaluate(SMALLEST_FONT_JS)
    assert smallest >= (16 if presenter else 12), smallest
    return stage


def lit(within, selector) -> list[str]:
    """The data-block of every lit node that `selector` finds within a page or a locator."""
    return within.locator(f"{selector}.lit").evaluate_all("nodes => nodes.map(n => n.dataset.block)")


@pytest.fixture(scope="module")
def paged_run():
    """The page's default requests and settings, run here by the engine itself to step 8."""
    from kvviz.lessons.paged_batching.logic import PagedLesson
    from kvviz.lessons.paged_batching.state import request_specs
    from kvviz.models import load_model

    lesson = PagedLesson.start(load_model("bundled"), request_specs(), 8, 40, True)
    for _ in range(PAGED_STEPS + 1):
        lesson.step()
    return lesson


@pytest.fixture(scope="module")
def speculative_run():
    """The page's default prompt and settings, run here by the engines themselves to pass 6."""
    from kvviz.lessons.speculative.logic import DEFAULT_PROMPT, SpeculativeLesson
    from kvviz.models import load_model

    lesson = SpeculativeLesson.start(load_model("bundled"), DEFAULT_PROMPT, 4, 48, 4)
    for _ in range(SPEC_STEPS + 1):
        lesson.step()
    return lesson


@pytest.mark.parametrize("presenter", [False, True])
def test_paged_stage_fits_lights_a_request_and_a_block_and_shows_the_records(app_url, presenter,
                                                                            paged_run):
    with browser_page(1280, 720) as page:
        open_stage(page, app_url, "paged_batching", PAGED_STEPS, presenter, f"Step {PAGED_STEPS} of {PAGED_STEPS}",
                   ["[data-testid='stage-sentence']", "[data-testid='stage-requests']",
                         "[data-testid='stage-pool']", "[data-testid='stage-summary']"])

        # the numbers are the engine's: each request's block table, the shared blocks' reference counts
        record = paged_run.records[PAGED_STEPS]
        blocks = {b.block_id: b for b in paged_run.pool_blocks(PAGED_STEPS)}
        rows = page.locator("[data-testid='stage-requests'] .rrow")
        assert rows.count() == len(record.requests)
        for index, state in enumerate(record.requests):
            row = rows.nth(index)
            assert row.locator(".rchip").inner_text() == paged_run.label(state.request_id)
            assert row.locator(".rentry .num").all_inner_texts() == [str(b) for b in state.block_table]
            refs = row.locator(".rentry").evaluate_all(
                "entries => entries.map(e => e.querySelector('.refs')?.textContent ?? '×1')")
            assert refs == [f"×{blocks[b].ref_cnt}" for b in state.block_table]
        shared = {b.block_id: b.ref_cnt for b in blocks.values() if b.ref_cnt > 1}
        assert shared == {0: 3, 1: 3}  # R1's prompt blocks, found by R2 and R4 in the prefix cache
        pool_refs = page.locator("[data-testid='stage-pool'] .pblock").evaluate_all(
            "boxes => Object.fromEntries(boxes.filter(b => b.querySelector('.refs'))"
            ".map(b => [Number(b.dataset.block), Number(b.querySelector('.refs').textContent.slice(1))]))")
        assert {int(k): v for k, v in pool_refs.items()} == shared
        held = sum(not b.free for b in blocks.values())
        summary = page.locator("[data-testid='stage-summary']").inner_text()
        assert f"{held} of {paged_run.num_blocks} blocks held" in summary

        # hovering R4 lights its four blocks in its table and in the pool, and nothing else
        r4 = record.requests[3]
        page.locator(f".rchip[data-request='{r4.request_id}']").hover()
        assert sorted(map(int, lit(page, ".pblock"))) == sorted(r4.block_table)
        assert lit(page, f".rentry[data-request='{r4.request_id}']") == [str(b) for b in r4.block_table]
        assert page.locator(".rentry.lit").count() == len(r4.block_table)
        # hovering the shared block 0 in the pool lights it in the three tables that point at it
        page.locator(".pblock[data-block='0']").hover()
        assert lit(page, ".rentry") == ["0", "0", "0"]
        owners = page.locator(".rchip.lit").evaluate_all("chips => chips.map(c => c.textContent)")
        assert owners == [paged_run.label(o) for o in blocks[0].owners]
        assert "reference count 3" in page.locator("[data-testid='stage-readout']").inner_text()
        if not presenter:
            page.screenshot(path=str(SHOTS / "stage_paged_hover_block_normal_1280x720.png"))


def test_a_replayed_paged_run_shows_a_preemption_as_blocks_given_back(app_url, tmp_path):
    from kvviz.lessons.paged_batching.file import export_paged
    from kvviz.lessons.paged_batching.logic import PagedLesson
    from kvviz.lessons.paged_batching.state import request_specs
    from kvviz.models import load_model

    run = PagedLesson.start(load_model("bundled"), request_specs(), 8, 12, True)  # a pool too small for all four
    while run.step() is not None:
        pass
    preempted_at = next(r.step for r in run.records if any(e.kind == "preempt" for e in r.events))
    victim = next(e for e in run.records[preempted_at].events if e.kind == "preempt")
    with browser_page(1280, 720) as page:
        replay(page, app_url, "paged_batching", "Start", export_paged(run, 0))
        stage_caption(page).get_by_text(f"Step 0 of {len(run.records) - 1}").wait_for()
        sent = []  # every message and request the browser sends to the server while it steps
        page.on("websocket", lambda ws: ws.on("framesent", lambda frame: sent.append("frame")))
        page.on("request", lambda request: sent.append(request.url))
        page.locator("[data-testid='kvviz-stage']").focus()
        for _ in range(preempted_at):
            page.keyboard.press("ArrowRight")
        stage_caption(page).get_by_text(f"Step {preempted_at} of").wait_for(timeout=DRAWN_MS)
        assert sent == []  # stepping is the browser's own
        still(page)
        page.screenshot(path=str(SHOTS / "stage_paged_preemption_normal_1280x720.png"))
        assert "preempted" in page.locator("[data-testid='stage-sentence']").inner_text()
        row = page.locator(f".rrow[data-request='{victim.request_id}']")
        assert row.locator(".rstate").inner_text() == "preempted"
        assert row.locator(".rentry.gone .num").all_inner_texts() == [str(b) for b in victim.block_ids]
        assert row.locator(".rentry:not(.gone)").count() == 0  # it holds nothing now
        freed = {b.block_id for b in run.pool_blocks(preempted_at) if b.free} & set(victim.block_ids)
        gone = page.locator(".pblock.gone").evaluate_all("boxes => boxes.map(b => Number(b.dataset.block))")
        assert set(gone) == freed and freed  # the blocks nobody else holds fade back into the pool
        # then the one report: the views below follow (the look-back slider, at step 0 before)
        look_back = page.get_by_role("slider", name=re.compile("Look back at step"))
        expect(look_back).to_have_value(str(preempted_at), timeout=SLOW_S * 1000)
        run_finished(page, timeout=SLOW_S)
        no_exceptions(page)


def test_the_fork_tabs_stage_splits_a_shared_block_at_copy_on_write(app_url):
    from kvviz.lessons.paged_batching import fork as fork_lesson
    from kvviz.lessons.paged_batching.fork_view import DEFAULT_PROMPT
    from kvviz.models import load_model

    run = fork_lesson.run_fork(load_model("bundled"), DEFAULT_PROMPT, n=4, max_tokens=12, block_size=4)  # the tab's
    copies = [e for e in run.records[1].events if e.kind == "copy"]
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/paged_batching")
        wait_drawn(page, page.get_by_role("tab", name="Parallel sampling: one prompt, n samples"), timeout=SLOW_S)
        panel = open_tab(page, "Parallel sampling: one prompt, n samples")
        press(page, "Fork", shows=stage_caption(panel), exact=False)  # the fork's stage
        stage = page.locator("[data-testid='kvviz-stage']").last
        stage.locator("[data-testid='stage-forward']").click()  # step 1, in the browser
        stage_caption(stage).get_by_text("Step 1 of").wait_for(timeout=DRAWN_MS)
        still(page)  # the copies split off the shared block
        page.screenshot(path=str(SHOTS / "stage_paged_fork_copy_on_write_normal_1280x720.png"))
        copied = stage.locator(".rentry.copied").evaluate_all(
            "entries => entries.map(e => [Number(e.dataset.request), e.querySelector('.num').textContent, "
            "e.querySelector('.from').textContent])")
        assert copied == [[e.request_id, str(e.block_ids[1]), f"←{e.block_ids[0]}"] for e in copies] and copies
        assert "copy-on-write" in stage.locator("[data-testid='stage-sentence']").inner_text().lower()
        keeper = next(r for r in run.records[1].requests if copies[0].block_ids[0] in r.block_table)
        stage.locator(f".rchip[data-request='{keeper.request_id}']").hover()
        assert sorted(map(int, lit(stage, ".pblock"))) == sorted(keeper.block_table)
        no_exceptions(page)


@pytest.mark.parametrize("presenter", [False, True])
def test_speculative_stage_fits_fills_and_empties_draft_slots_as_the_records_say(app_url, presenter,
                                                                                speculative_run):
    with browser_page(1280, 720) as page:
        stage = open_stage(page, app_url, "speculative", SPEC_STEPS, presenter,
                           f"Pass {SPEC_STEPS + 1} of {SPEC_STEPS + 1}",  # its end: the rolled-back slots empty
                           ["[data-testid='stage-sentence']", "[data-testid='stage-drafts']",
                            "[data-testid='stage-blocks']", "[data-testid='stage-summary']"])
        cut = page.locator(".tslot").evaluate_all(
            "slots => slots.filter(s => s.scrollWidth > s.clientWidth + 1).length")
        assert cut == 0  # every token's text fits its slot

        # the drafts, the verdict, the rolled-back slots and the freed block are the records'
        lesson, block_size = speculative_run, 4
        row = lesson.draft_steps()[SPEC_STEPS]
        record = lesson.records[SPEC_STEPS]
        assert row.rolled_back_slots and row.freed_block_ids  # the pass this test is about
        drafts = page.locator("[data-testid='stage-drafts'] .chip.draft")
        assert drafts.count() == len(row.draft_token_ids)
        assert page.locator(".chip.draft.accepted").count() == row.num_accepted
        rolled = page.locator(".tslot.rolled").evaluate_all(
            "slots => slots.map(s => [Number(s.closest('.tblock').dataset.block), "
            "[...s.parentNode.children].indexOf(s)])")
        assert rolled == [[slot // block_size, slot % block_size] for slot in row.rolled_back_slots]
        ids = page.locator("[data-testid='stage-blocks'] .tblock").evaluate_all(
            "boxes => boxes.map(b => Number(b.dataset.block))")
        assert ids == record.requests[0].block_table + row.freed_block_ids
        assert page.locator(".tblock.freed").count() == len(row.freed_block_ids)
        summary = lesson.summary(SPEC_STEPS)
        text = page.locator("[data-testid='stage-summary']").inner_text()
        assert f"{summary['accepted']} of {summary['proposed']} drafts accepted" in text
        assert f"{summary['tokens']} tokens from {summary['passes']} forward passes" in text

        # hovering a rejected draft lights the slot it was written to; hovering a block lights it
        page.locator(".chip.draft.rejected[data-draft='3']").hover()
        slot = row.rolled_back_slots[3 - row.num_accepted]
        assert page.locator(".tslot.lit").count() == 1
        assert page.locator(f".tblock[data-block='{slot // block_size}'] .tslot.rolled.lit").count() == 1
        last_block = record.requests[0].block_table[-1]
        page.locator(f".tblock[data-block='{last_block}'] .id").hover()
        assert lit(page, ".tblock") == [str(last_block)]

        # a step back in the browser, to pass 5, where the model accepted all four drafts
        stage.focus()
        page.keyboard.press("ArrowLeft")
        stage_caption(page).get_by_text(f"Pass {SPEC_STEPS} of").wait_for(timeout=DRAWN_MS)
        earlier = lesson.draft_steps()[SPEC_STEPS - 1]
        assert page.locator(".tslot.accepted").count() == earlier.num_accepted == 4
        assert page.locator(".tslot.rolled").count() == 0
        no_exceptions(page)
