"""What a class sees at a projector on the Memory bill, the Model lab and Batch generation (issue 33,
items 8-10): the bill's sliders beside the bill they change, tables of rounded numbers with their
units under short headers, labels clear of error bars, and figures that say how far they may swing."""

import re
import statistics
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.bench import Agreement, SystemRun
from kvviz.lessons.batch_generation import figures as batch_figures
from kvviz.lessons.batch_generation.logic import TransformersComparison
from kvviz.lessons.model_lab import logic as lab
from kvviz.models import CustomShape

ROOT = Path(__file__).resolve().parents[2]
MODES = pytest.mark.parametrize("presenter", [False, True], ids=["normal", "presenter"])
UNIT = re.compile(r"^[\d,.]+( tokens| ms| ×|×| [KMG]?i?B| bytes| s| tokens/s)$")


def open_page(path: str, presenter: bool = False) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    if presenter:
        at.query_params["presenter"] = "1"
    at.run()
    at.switch_page(path).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def in_order(node, path=()):
    """Every element under `node`, in page order, with the (type, index) of each block above it."""
    for index, child in getattr(node, "children", {}).items():
        here = path + ((getattr(child, "type", ""), index),)
        yield child, here
        yield from in_order(child, here)


def outer_column(path) -> tuple:
    """The path down to the outermost column an element sits in."""
    first = next(i for i, (kind, _) in enumerate(path) if kind == "column")
    return path[:first + 1]


# ---- the Memory bill: the sliders the class watches sit right above the bill ----------------------

@MODES
def test_the_bills_watched_sliders_sit_right_above_the_bill(presenter):
    at = open_page("lessons/memory_bill.py", presenter)
    assert bool(at.session_state["presenter"]) is presenter
    elements = list(in_order(at.main))
    place = {}
    for position, (element, path) in enumerate(elements):
        key = getattr(element, "key", None) or getattr(element, "label", None)
        if key in ("bill_context", "bill_batch", "bill_dtype", "bill_device", "KV cache", "bill_layers"):
            place.setdefault(key, (position, path))
    bill_position, bill_path = place["KV cache"]
    for key in ("bill_context", "bill_batch", "bill_dtype", "bill_device"):
        position, path = place[key]
        assert outer_column(path) == outer_column(bill_path), key  # the bill's own column, not the model's
        assert position < bill_position, key
    assert outer_column(place["bill_layers"][1]) != outer_column(bill_path)  # the model's shape stays on the left

    at.select_slider(key="bill_context").set_value(32768).run()  # moving one changes the bill beside it
    assert next(m.value for m in at.metric if m.label == "KV cache") == "4.00 GiB"


# ---- the Model lab: a table of rounded numbers with units ----------------------------------------

TINY = CustomShape(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, max_context=64)


@pytest.fixture(scope="module")
def tiny_result():
    lm = lab.build_lab_model(TINY, device="cpu")
    return lab.measure(lm, [8, 32], repeats=3, sample_tokens=0)


@MODES
def test_the_lab_tables_hold_rounded_numbers_with_units_under_short_headers(presenter, tiny_result):
    at = open_page("lessons/model_lab.py", presenter)
    at.session_state["lab_result"], at.session_state["lab_result_shape"] = tiny_result, TINY
    at.run()
    assert not at.exception
    main, spread = (frame.value for frame in at.dataframe)
    assert list(main.columns) == ["context", "with cache", "without", "ratio", "cache held"]
    assert len(main.columns) <= 5 and all(len(name) <= 12 for name in main.columns)  # fits 1280 px
    assert main["context"].tolist() == ["8 tokens", "32 tokens"]
    for frame in (main, spread):
        for column in frame.columns:
            for value in frame[column]:
                assert isinstance(value, str), (column, value)  # no raw float like 7.5239
                if column not in ("tokens run",) and "spread" not in column:
                    assert UNIT.match(value), (column, value)
    assert all(re.match(r"^[\d.]+-[\d,.]+ ms$", v) for v in spread["with cache, spread"])
    assert spread["engine"].tolist() == spread["formula"].tolist()
    with_cache = next(m for m in at.metric if m.label == "With the cache")
    assert with_cache.proto.delta == "median of 3 warm steps"  # the figure says it is a median, beside it


def timing(context, cached, uncached, repeats=3):
    return lab.DecodeTiming(context, statistics.median(cached), statistics.median(uncached), 0, 0,
                            (min(cached), max(cached)), (min(uncached), max(uncached)), repeats)


def test_the_lab_says_the_machine_is_busy_when_steps_scatter_past_ten_percent():
    steady = lab.LabResult("m", 1, 1, 2, 1, "", "cpu", [timing(510, [10.0, 10.2, 10.5], [50, 51, 53])])
    assert steady.spread_note() is None
    swinging = lab.LabResult("m", 1, 1, 2, 1, "", "cpu", [timing(510, [0.069, 0.118, 0.246], [1.0, 1.02, 1.05])],
                             load_before=6.5)
    note = swinging.spread_note()
    assert note.startswith("At 510 tokens the 3 timed steps ranged 69.0-246 ms with the cache")
    assert "the machine is busy (load 6.5 on" in note and "next Measure may show other times" in note


# ---- Batch generation: the comparison's figures, labels and spread ------------------------------------

def comparison(ours, theirs, tokens=400, load=None):
    def run(name, seconds):
        return SystemRun(name, [[1]], statistics.median(seconds), tokens, tokens + 40,
                         details={"all_seconds": seconds})

    return TransformersComparison(run("kvviz", ours), run("hf generate (bs 16)", theirs), Agreement(16, 16, {}),
                                  hf_batch_size=16, load_before=load)


def test_the_comparison_table_holds_rounded_numbers_with_units():
    rows = comparison([7.5239, 7.61, 7.48], [13.2, 13.0, 13.4]).table()
    assert list(rows[0]) == ["system", "output tokens/s", "median run", "each run", "output tokens", "generated"]
    assert rows[0]["output tokens/s"] == "53 tokens/s" and rows[0]["median run"] == "7.52 s"
    assert rows[0]["each run"] == "7.52 s, 7.61 s, 7.48 s" and rows[1]["generated"] == "440"
    assert all(isinstance(value, str) for row in rows for value in row.values())


def test_the_speed_labels_sit_right_of_their_error_bars():
    rows = comparison([7.5, 7.9, 6.1], [13.2, 13.0, 15.4]).rows()
    figure = batch_figures.speed_comparison(rows)
    bars, labels = figure.data
    assert bars.text is None  # no label inside the bar, where the whisker ends
    for row, x, text in zip(rows, labels.x, labels.text):
        assert x == row["fastest run tokens/s"]  # the label starts where the whisker ends
        assert text.strip() == f"{row['output tokens/s']:,.0f} tokens/s"
    assert labels.textposition == "middle right" and figure.layout.xaxis.range[1] > 1.3 * max(labels.x)


def test_a_comparison_says_when_single_runs_swing_past_ten_percent():
    assert comparison([7.5, 7.6, 7.4], [13.2, 13.0, 13.3]).spread_note() is None
    note = comparison([7.5, 11.0, 7.4], [13.2, 13.0, 13.3], load=5.0).spread_note()
    assert note.startswith("Single runs paired gave 1.18× to 1.80×, more than 10% either side")
    assert "the machine is busy (load 5.0 on" in note


def test_the_batch_page_says_what_each_throughput_counts():
    at = open_page("lessons/batch_generation.py", presenter=True)
    at.slider(key="batch_count").set_value(4)
    at.slider(key="batch_prompt_len").set_value((4, 8))
    at.slider(key="batch_output_len").set_value((3, 6)).run()
    next(b for b in at.button if b.label == "Run the batch").click().run()
    next(b for b in at.button if b.label == "Run both and compare").click().run()
    assert not at.exception and not at.error
    done, compared = at.session_state["batch_run"], at.session_state["batch_compare_run"]
    metrics = {m.label: m for m in at.metric}
    assert metrics["Output tokens/s"].value == f"{done.engine_tokens_per_s:,.0f}"
    assert metrics["Output tokens/s"].proto.delta == "engine steps"  # short: five metrics share 1280 px
    assert metrics["kvviz tokens/s"].value == f"{compared.kvviz.tokens_per_s:,.0f}"
    assert metrics["kvviz tokens/s"].proto.delta == "median, 3 warm runs"
    low, high = compared.speedup_range
    assert metrics["kvviz is"].proto.delta == f"range {low:.2f}×-{high:.2f}×"
    assert compared.throughputs_note(done) in [c.value for c in at.caption]
    note = compared.spread_note() or compared.busy_note()
    assert note is None or note in [w.value for w in at.warning]
    table = next(f.value for f in at.dataframe if "median run" in f.value.columns)
    assert table["output tokens/s"].str.endswith(" tokens/s").all()
