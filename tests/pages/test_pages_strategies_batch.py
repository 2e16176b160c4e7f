"""The "Cache strategies" and "Batch generation" pages under AppTest, and the batch job beneath them.

The pages must agree with the kvviz functions they show: the same comparison, the same GQA
report, the same engine outputs. Bad inputs end in one sentence, never an exception.
"""

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from kvviz import Engine
from kvviz.lessons.batch_generation.figures import request_spans, rolling
from kvviz.lessons.batch_generation.logic import BatchSettings, run_batch
from kvviz.lessons.cache_strategies.figures import binary_ticks, divergence_html, one_two_five
from kvviz.lessons.cache_strategies.logic import compare_strategies, lesson_specs
from kvviz.lessons.cache_strategies.state import EXAMPLE_PROMPT, gqa_choices, group_sizes
from kvviz.shapes import format_bytes
from kvviz.workloads import MAX_UPLOAD_BYTES, Workload, WorkloadError, parse_upload, synthetic_workload

from app_tests import ROOT, button

APP = ROOT / "app.py"


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=240)
    at.run()
    at.switch_page(page).run()
    assert not at.exception
    return at


# ---- Cache strategies ----------------------------------------------------------------------
@pytest.fixture()
def strategies_page():
    return open_page("lessons/cache_strategies.py")


def test_strategies_page_shows_what_compare_strategies_measures(strategies_page, bundled):
    at = strategies_page
    at.slider(key="strategies_max_tokens").set_value(4)
    at.slider(key="strategies_window").set_value(8)
    at.selectbox(key="strategies_group_size").set_value(16)
    at.slider(key="strategies_residual").set_value(2).run()
    assert "strategies_run" not in at.session_state  # nothing runs on a widget change
    button(at, "Run every strategy").click().run()
    assert not at.exception and not at.error
    shown = at.session_state["strategies_run"]["results"]
    expected = compare_strategies(bundled, EXAMPLE_PROMPT, 4, lesson_specs(8, 16, 2))
    assert [r.label for r in shown] == ["dynamic", "static", "sliding window (W=8)", "int8 (group 16) + 2 recent full",
                                        "int4 (group 16) + 2 recent full", "paged", "no cache"]
    for got, want in zip(shown, expected):
        assert got.label == want.label and got.token_ids == want.token_ids
        assert got.held_bytes == want.held_bytes and got.predicted_bytes == want.predicted_bytes
        assert got.first_divergence == want.first_divergence
        np.testing.assert_allclose(got.kl, want.kl, rtol=1e-3, atol=1e-6)
    assert len(at.get("plotly_chart")) == 5  # memory, time, quantization error, KL, the bill
    paged = shown[5]  # its line is flat at the whole pool: the caption says so, with the pool's size
    assert len(set(paged.held_bytes)) == 1
    assert any(f"whole pool ({paged.options['num_blocks']} blocks" in c.value and format_bytes(paged.held_bytes[-1])
               in c.value for c in at.caption)
    metrics = {m.label: m.value for m in at.metric}
    int8 = shown[3].final_bill
    assert metrics["Measured (tensors' bytes)"] == format_bytes(int8.measured_bytes)
    assert metrics["kvviz.memory_bill predicts"] == format_bytes(int8.measured_bytes)
    at.selectbox(key="strategies_bill_of").set_value("static")
    at.toggle(key="strategies_log_memory").set_value(False).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Measured (tensors' bytes)"] == format_bytes(shown[1].final_bill.measured_bytes)


def test_strategies_bad_inputs_give_one_sentence_and_keep_the_results(strategies_page):
    at = strategies_page
    at.text_area(key="strategies_prompt").set_value("   ")
    button(at, "Run every strategy").click().run()
    assert [e.value for e in at.error] == ["The prompt is empty; type some text to start from."]
    at.text_area(key="strategies_prompt").set_value("JULIET:")
    at.slider(key="strategies_max_tokens").set_value(3)
    button(at, "Run every strategy").click().run()
    assert not at.error
    before = at.session_state["strategies_run"]
    at.text_area(key="strategies_prompt").set_value("word " * 600)
    button(at, "Run every strategy").click().run()
    assert len(at.error) == 1 and "context" in at.error[0].value
    assert at.session_state["strategies_run"] is before and not at.exception


def test_gqa_tab_shows_gqa_report(strategies_page, bundled):
    at = strategies_page
    assert at.selectbox(key="strategies_gqa_heads").options == ["1 (MQA)"]  # the bundled model has 2 KV heads
    button(at, "Convert and measure").click().run()
    assert not at.exception and not at.error
    report = at.session_state["strategies_gqa_run"]
    assert (report.kv_heads_before, report.kv_heads_after) == (2, 1)
    assert report.bytes_per_token_after * 2 == report.bytes_per_token_before
    assert report.bytes_per_token_after == report.predicted_bytes_per_token_after
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Cache per token, after"] == format_bytes(report.bytes_per_token_after)
    assert metrics["Held-out loss, after"] == f"{report.loss_after:.3f}"


def test_strategy_helpers():
    assert group_sizes(32) == [4, 8, 16, 32] and group_sizes(6) == [6]
    assert gqa_choices(8) == [1, 2, 4] and gqa_choices(1) == []
    assert binary_ticks(40_000, 1_600_000) == [2**k for k in range(15, 22)]
    assert one_two_five(0.021, 0.6) == [0.02, 0.05, 0.1, 0.2, 0.5, 1.0] and one_two_five(0.5, 0.5) == [0.2, 0.5, 1.0]
    page = divergence_html([{"label": "a<b", "color": "#000", "pieces": ["x", "<y>", "z"], "divergence": 1},
                            {"label": "same", "color": "#000", "pieces": ["x"], "divergence": None}])
    assert "a&lt;b" in page and "&lt;y&gt;z" in page and "▶ step 1" in page and page.count("▶") == 1


# ---- Batch generation ----------------------------------------------------------------------
@pytest.fixture()
def batch_page():
    at = open_page("lessons/batch_generation.py")
    at.slider(key="batch_count").set_value(5)
    at.slider(key="batch_prompt_len").set_value((4, 8))
    at.slider(key="batch_prefix").set_value(16)
    at.slider(key="batch_output_len").set_value((3, 6))
    at.number_input(key="batch_max_num_seqs").set_value(2).run()
    return at


def test_batch_run_matches_the_engine(batch_page, bundled):
    at = batch_page
    button(at, "Run the batch").click().run()
    assert not at.exception and not at.error
    result = at.session_state["batch_run"]
    workload = synthetic_workload(bundled.tokenizer, 4096, 5, (4, 8), (3, 6), 16, 0)
    assert result.workload.prompts == workload.prompts and result.workload.max_tokens == workload.max_tokens
    engine = Engine(bundled, block_size=16, num_blocks=result.num_blocks, max_num_seqs=2, max_num_batched_tokens=256)
    expected = engine.generate(workload.prompts, [BatchSettings().sampling(n, i)
                                                  for i, n in enumerate(workload.max_tokens)])
    assert [o.token_ids for o in result.outputs] == [o.token_ids for o in expected]
    assert [len(o.token_ids) for o in result.outputs] == workload.max_tokens
    series = result.series
    assert series[-1].finished == 5 and max(p.waiting for p in series) == 3 and max(p.running for p in series) == 2
    assert sum(p.tokens_sampled for p in series) == result.output_tokens
    assert result.prefix_hit_tokens == engine.stats["cached_tokens"] > 0  # the shared 16-token prefix
    lines = [json.loads(line) for line in result.to_jsonl().splitlines()]
    assert [line["token_ids"] for line in lines] == [o.token_ids for o in expected]
    assert len(at.get("download_button")) == 1 and len(at.get("plotly_chart")) == 2
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Generated tokens"] == str(sum(workload.max_tokens))

    button(at, "Run both and compare").click().run()
    assert not at.exception and not at.error
    compared = at.session_state["batch_compare_run"]
    assert compared.agreement.all_equal and compared.kvviz.outputs == [o.token_ids for o in expected]
    assert {m.label: m.value for m in at.metric}["Outputs identical"] == "5 of 5"


def test_a_stopped_comparison_says_how_far_it_got_and_keeps_nothing(batch_page):
    """Stop interrupts the page's script run; the next run finds how far it got under batch_comparing."""
    at = batch_page
    button(at, "Run the batch").click().run()
    at.session_state["batch_comparing"] = (3, 8)
    at.run()
    assert not at.exception and not at.error and "batch_comparing" not in at.session_state
    assert [w.value for w in at.warning if "Stopped" in w.value][0].startswith("Stopped after 3 of 8 runs")
    assert "batch_compare_run" not in at.session_state
    button(at, "Run both and compare").click().run()  # it runs again, and the note goes
    assert not at.exception and not at.error and "batch_comparing" not in at.session_state
    assert at.session_state["batch_compare_run"].agreement.all_equal
    assert not any("Stopped" in w.value for w in at.warning)


def test_a_stopped_run_says_how_far_it_got_and_keeps_only_the_last_finished_run(batch_page):
    """Stop interrupts the run's script run; the next run finds how far it got under batch_running."""
    at = batch_page
    at.session_state["batch_running"] = (0, 5)  # stopped before any run finished: nothing to show
    at.run()
    assert not at.exception and not at.error and "batch_running" not in at.session_state
    said = [w.value for w in at.warning if "Stopped" in w.value]
    assert said == ["Stopped after 0 of 5 requests had finished; a stopped run is not kept. "
                    "Press **Run the batch** to start again."]
    assert "batch_run" not in at.session_state
    button(at, "Run the batch").click().run()
    assert not at.exception and "batch_running" not in at.session_state  # a run that ends is not stopped
    assert not any("Stopped" in w.value for w in at.warning)
    finished = at.session_state["batch_run"].seconds
    at.session_state["batch_running"] = (3, 5)  # a second run, stopped: the first one's results stay
    at.run()
    said = [w.value for w in at.warning if "Stopped" in w.value][0]
    assert said.startswith("Stopped after 3 of 5 requests") and "from the last run that finished" in said
    assert at.session_state["batch_run"].seconds == finished and at.metric[0].label == "Output tokens/s"
    button(at, "Run the batch").click().run()  # it runs again, and the note goes
    assert not at.exception and not any("Stopped" in w.value for w in at.warning)


def test_batch_pool_too_small_gives_one_sentence(batch_page):
    at = batch_page
    at.number_input(key="batch_num_blocks").set_value(1).run()
    button(at, "Run the batch").click().run()
    assert not at.exception and len(at.error) == 1
    assert "blocks of 16 tokens but the pool has only 1" in at.error[0].value
    assert "batch_run" not in at.session_state


def test_batch_uploads_are_checked(batch_page):
    at = batch_page
    at.radio(key="batch_source").set_value("Upload a file").run()
    assert button(at, "Run the batch").disabled  # nothing uploaded yet
    for name, data, sentence in [
        ("prompts.txt", bytes(range(256)), "prompts.txt is not UTF-8 text"),
        ("photo.png", b"\x89PNG", "photo.png is not a .txt or .jsonl file"),
        ("big.txt", b"to be\n" * (MAX_UPLOAD_BYTES // 6 + 1), "MiB limit"),
        ("empty.txt", b"\n \n", "empty.txt holds no prompts"),
        ("bad.jsonl", b'{"prompt": "a"}\nnot json\n', "Line 2 of bad.jsonl is not valid JSON"),
    ]:
        at.file_uploader(key="batch_upload").set_value((name, data, "application/octet-stream")).run()
        assert not at.exception
        assert len(at.error) == 1, (name, [e.value for e in at.error])
        assert sentence in at.error[0].value.replace("\\", "").replace("\u2060", "")  # escaped for markdown
        assert button(at, "Run the batch").disabled
    jsonl = b'{"prompt": "ROMEO:"}\n\n{"prompt": "JULIET:"}\n'
    at.file_uploader(key="batch_upload").set_value(("p.jsonl", jsonl, "application/json")).run()
    assert not at.error and "2 prompts" in at.success[0].value
    button(at, "Run the batch").click().run()
    assert not at.exception and not at.error
    result = at.session_state["batch_run"]
    assert [row["prompt (end)"] for row in result.rows()] == ["ROMEO:", "JULIET:"]
    assert all(3 <= len(o.token_ids) <= 6 for o in result.outputs)
    assert [h for h in at.subheader if "2 requests in" in h.value]
    # another file: the results on screen ran the old prompts, so they go until the next run
    at.file_uploader(key="batch_upload").set_value(("q.txt", b"KING:\nQUEEN:\nHAMLET:\n", "text/plain")).run()
    assert not at.exception and "3 prompts" in at.success[0].value
    assert "batch_run" not in at.session_state and not [h for h in at.subheader if "requests in" in h.value]
    assert any("Run the batch" in i.value for i in at.info)


def test_batch_job_pieces(bundled):
    assert parse_upload("a.TXT", "one\n\ntwo\n".encode()) == ["one", "two"]
    with pytest.raises(WorkloadError, match="range"):
        synthetic_workload(bundled.tokenizer, 4096, 3, (9, 4))
    with pytest.raises(WorkloadError, match="at least one prompt"):
        synthetic_workload(bundled.tokenizer, 4096, 0)
    work = synthetic_workload(None, 4096, 3, (2, 3), (1, 2), shared_prefix=5, seed=1)  # no tokenizer: random ids
    assert all(p[:5] == work.prompts[0][:5] and 7 <= len(p) <= 8 for p in work.prompts)
    with pytest.raises(WorkloadError, match="no prompts"):
        run_batch(bundled, Workload("empty", [], []))
    assert rolling([2, 2, 2], [0.5, 1.0, 1.5], width_s=1.0) == [4.0, 4.0, 4.0]


def test_request_spans_follow_the_steps():
    from types import SimpleNamespace as Point

    series = [Point(time_s=1.0, ran_ids=[0]), Point(time_s=2.0, ran_ids=[0, 1]), Point(time_s=3.0, ran_ids=[1]),
              Point(time_s=4.0, ran_ids=[0])]
    assert request_spans(series, 2) == [[(0.0, 2.0), (3.0, 4.0)], [(1.0, 3.0)]]
