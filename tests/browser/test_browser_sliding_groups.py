"""Issue 26's sliding-window view in a real browser at 1280x720, in normal and presenter mode: the
built-in tiny Gemma-3 (five sliding layers with a 16-token window to one full layer), picked in the
sidebar of the Paged cache and batching page, stepped well past its window with the page's default
requests and settings. Both layer groups' block tables are drawn; the first request's sliding table
holds no more blocks than its window needs while its full table grows; every block id, every given-back
block and the groups' blocks in use equal a PagedLesson run of the engine made here with the same
requests and settings. The screenshot goes to docs/screenshots/paged_sliding_groups_1280x720.png.
"""

import pytest

from kvviz.lessons.paged_batching.logic import DEFAULT_REQUESTS, PagedLesson, RequestSpec
from kvviz.models import TINY_GEMMA3, load_model
from kvviz.ui.app_server import ROOT

from app_reads import no_exceptions
from chromium import SLOW_S, browser_page, click_to_next_step, still
from lesson_steps import start_on_model

BLOCK_SIZE, NUM_BLOCKS, PREFIX = 8, 40, True  # the page's defaults (lessons/paged_batching.py)
STEPS = 12  # after Start's step 0: the first request's 25-token prompt is already past the 16-token window
SCREENSHOT = ROOT / "docs" / "screenshots" / "paged_sliding_groups_1280x720.png"
TITLE = "Block tables per layer group"

# the group tables' figure as drawn: its title (with the blocks in use) and each cell: row label, logical
# block, the text inside (a physical block id, or × for a block the window gave back)
GROUP_TABLES_JS = """(title) => {
  for (const plot of document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')) {
    const shown = plot.querySelector('.gtitle')?.textContent || '';
    if (!shown.includes(title)) continue;
    const ticks = plot._fullLayout.yaxis.ticktext;
    return {title: shown, ticks: Array.from(plot.querySelectorAll('.ytick text'), t => t.textContent),
            cells: plot._fullData.map(d => [ticks[d.y[0]], d.x[0], d.text[0]])};
  }
  return null;
}"""


@pytest.fixture(scope="module")
def engine_run():
    """The same requests and settings run here, step by step, as the page's Start and Step run them."""
    lesson = PagedLesson.start(load_model(TINY_GEMMA3, device="cpu"), [RequestSpec(*r) for r in DEFAULT_REQUESTS],
                               BLOCK_SIZE, NUM_BLOCKS, PREFIX)
    for _ in range(STEPS + 1):
        assert lesson.step() is not None
    return lesson


def expected_cells(lesson, step: int) -> list[list]:
    """What the engine's record of `step` says each group's table holds, request by request."""
    record = lesson.records[step]
    cells = []
    for state in record.requests:
        for g, group in enumerate(record.layer_groups):
            if not state.group_block_tables or not state.group_block_tables[g]:
                continue
            row = f"{lesson.label(state.request_id)} · {group.name}" + (
                f" ({group.window}-token window)" if group.window else "")
            cells += [[row, logical, "×" if physical is None else str(physical)]
                      for logical, physical in enumerate(state.group_block_tables[g])]
    return cells


def held(cells: list[list], row: str) -> int:
    """Blocks a row of the drawing holds (given-back ones, ×, left out)."""
    return sum(1 for label, _, text in cells if label == row and text != "×")


@pytest.mark.parametrize("presenter", [False, True], ids=["normal", "presenter"])
def test_sliding_group_table_stays_flat_while_the_full_one_grows(app_url, presenter, engine_run):
    with browser_page(1280, 720) as page:
        start_on_model(page, f"{app_url}/paged_batching", "Start", TINY_GEMMA3, "tiny Gemma-3", presenter)
        drawn = []
        for step in range(STEPS + 1):
            if step:
                click_to_next_step(page, page.get_by_role("button", name="Step", exact=True), timeout=SLOW_S)
            no_exceptions(page)
            figure = page.evaluate(GROUP_TABLES_JS, TITLE)
            assert figure, f"no '{TITLE}' chart at step {step}"
            record = engine_run.records[step]
            for group in record.layer_groups:  # the title's blocks in use, group by group
                assert f"{group.name} {group.num_blocks - group.num_free_blocks} of {group.num_blocks}" \
                    in figure["title"], (step, figure["title"])
            assert figure["cells"] == expected_cells(engine_run, step), step
            drawn.append(figure)

        first = engine_run.label(engine_run.records[0].requests[0].request_id)
        full_row, sliding_row = f"{first} · full", f"{first} · sliding (16-token window)"
        assert {full_row, sliding_row} <= set(drawn[-1]["ticks"])  # both groups' rows are drawn, labelled
        full = [held(f["cells"], full_row) for f in drawn]
        sliding = [held(f["cells"], sliding_row) for f in drawn]
        window_blocks = 16 // BLOCK_SIZE + 1  # a window that starts inside a block spans one more
        assert full[-1] > full[1] and full == sorted(full), full  # the full table only grows
        assert max(sliding[1:]) <= window_blocks and sliding[-1] < full[-1], sliding  # flat at the window
        assert any(text == "×" for label, _, text in drawn[-1]["cells"] if label == sliding_row)

        chart = page.locator("[data-testid='stMain'] .js-plotly-plot").filter(has_text=TITLE).first
        chart.scroll_into_view_if_needed()
        page.mouse.move(1279, 719)  # no hover: the chart's toolbar shows only under the pointer
        still(page)  # the chart's hover toolbar fades out
        assert "inside: physical block id" in page.evaluate(GROUP_TABLES_JS, TITLE)["title"]
        assert not chart.locator(".xtitle").evaluate(  # the axis title fits the chart, not cut at its edge
            "t => { const b = t.getBoundingClientRect(), p = t.closest('.js-plotly-plot').getBoundingClientRect(); "
            "return b.left < p.left || b.right > p.right; }")
        name = SCREENSHOT if not presenter else SCREENSHOT.with_name("paged_sliding_groups_presenter_1280x720.png")
        page.screenshot(path=str(name))
