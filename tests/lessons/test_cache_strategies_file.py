"""The Cache strategies lesson draws only from its comparison results: export, and replay with no model."""

import json

import pytest

from kvviz.lessons.cache_strategies.file import MAX_RESULTS, MAX_STEPS, export_strategies, import_strategies
from kvviz.lessons.cache_strategies.logic import compare_strategies, eight_bit_rows, lesson_specs
from kvviz.lessons.cache_strategies.state import EXAMPLE_PROMPT, comparison, replayed
from kvviz.lessons.files import LESSON_FORMAT, MAX_LESSON_BYTES, LessonFileError
from kvviz.lessons.paged_batching.file import import_paged
from kvviz.lessons.prefill_decode.file import import_lesson
from kvviz.lessons.speculative.file import import_speculative
from kvviz.ui.text import plain

from app_tests import one_sentence, open_lesson

SETTINGS = {"max_tokens": 6, "window": 4, "group_size": 8, "residual": 2, "timing_runs": 2}


@pytest.fixture(scope="module")
def run(tiny_lm):
    """Every strategy of the page on the tiny model: the comparison as the page keeps it."""
    specs = lesson_specs(SETTINGS["window"], SETTINGS["group_size"], SETTINGS["residual"], tiny_lm.max_context)
    results = compare_strategies(tiny_lm, EXAMPLE_PROMPT, SETTINGS["max_tokens"], specs, SETTINGS["timing_runs"])
    pieces = [[tiny_lm.tokenizer.decode([t]) for t in r.token_ids] for r in results]
    return comparison(results, tiny_lm.name, EXAMPLE_PROMPT, SETTINGS, pieces,
                      eight_bit=eight_bit_rows(tiny_lm, SETTINGS["group_size"]))


def test_export_then_import_gives_equal_results(run):
    file = import_strategies(export_strategies(run).encode())
    assert file["results"] == run["results"]  # every field, the bill's differences too
    assert [r.final_bill.differences for r in file["results"]] == [r.final_bill.differences for r in run["results"]]
    assert file["pieces"] == [row["pieces"] for row in run["texts"]]
    assert (file["settings"], file["prompt"], file["model_name"]) == (SETTINGS, EXAMPLE_PROMPT, "tiny llama")
    replay = replayed(file)
    assert replay["replay"] and not run["replay"]
    assert (replay["table"], replay["texts"], replay["eight_bit"]) == (run["table"], run["texts"], run["eight_bit"])
    # the tiny llama: 2 layers x 2 KV heads x K and V x (16 one-byte values + a float32 scale), or 16 float32s
    assert [row.bytes_per_token for row in replay["eight_bit"]][1:] == [2 * 2 * 2 * (16 + 4)] * 2 + [2 * 2 * 2 * 16 * 4]


def damage(run, change) -> str:
    data = json.loads(export_strategies(run))
    change(data)
    return json.dumps(data)


def results(data: dict, index: int) -> dict:
    return data["results"][index]


@pytest.mark.parametrize("change, field", [
    (lambda d: d["settings"].update(max_tokens="6"), "settings.max_tokens"),  # a wrong type
    (lambda d: d["settings"].update(residual=-1), "settings.residual"),
    (lambda d: d.update(results=[{}] * (MAX_RESULTS + 1)), "results"),  # a huge list, refused by its length
    (lambda d: results(d, 1).update(kl=[0.0] * (MAX_STEPS + 1)), r"results\[1\].kl"),
    (lambda d: d.pop("pieces"), "pieces"),  # a missing field
    (lambda d: results(d, 2).pop("final_bill"), r"results\[2\].final_bill"),
    (lambda d: d.update(results=[]), r"results \(the number of strategies\)"),
    (lambda d: results(d, 0).update(strategy="paged"), r"results\[0\].strategy"),
    (lambda d: results(d, 1).update(strategy="os.system"), r"results\[1\].strategy"),
    (lambda d: results(d, 3).update(options={"bits": "8"}), r"results\[3\].options.bits"),
    (lambda d: results(d, 3).update(options={"__class__": 8}), r"results\[3\].options.__class__"),
    (lambda d: results(d, 1)["held_bytes"].pop(), r"results\[1\].held_bytes"),
    (lambda d: results(d, 1).update(kl=[-1.0] * len(results(d, 1)["kl"])), r"results\[1\].kl\[0\]"),
    (lambda d: results(d, 2).update(first_divergence="3"), r"results\[2\].first_divergence"),
    (lambda d: results(d, 1)["final_bill"]["differences"][0].update(num_bytes=1),
     r"results\[1\].final_bill.differences"),
    (lambda d: results(d, 1)["final_bill"]["differences"][0].update(num_bytes=True),
     r"results\[1\].final_bill.differences\[0\].num_bytes"),
    (lambda d: d["pieces"][0].pop(), r"pieces\[0\]"),
    (lambda d: d["pieces"][0].__setitem__(0, 7), r"pieces\[0\]\[0\]"),
    (lambda d: results(d, 0).update(__class__="os.system"), r"results\[0\].__class__"),
])
def test_damaged_files_are_refused_in_one_sentence_naming_the_field(run, change, field):
    with pytest.raises(LessonFileError, match=f"field {field} ") as refused:
        import_strategies(damage(run, change))
    assert one_sentence(str(refused.value)), str(refused.value)


def test_a_huge_file_and_not_json_are_refused_in_one_sentence():
    for data, said in [(b" " * (MAX_LESSON_BYTES + 1), "MiB limit"), (b"\xff{", "not JSON")]:
        with pytest.raises(LessonFileError, match=said) as refused:
            import_strategies(data)
        assert one_sentence(str(refused.value)), str(refused.value)


def test_each_page_refuses_the_other_lessons_file(run):
    file = export_strategies(run)
    for other in (import_lesson, import_paged, import_speculative):
        with pytest.raises(LessonFileError, match="holds the “Cache strategies” lesson") as refused:
            other(file)
        assert one_sentence(str(refused.value))
    for lesson, page in [("speculative", "Speculative decoding"), ("paged_batching", "Paged cache and batching")]:
        with pytest.raises(LessonFileError, match=f"holds the “{page}” lesson"):
            import_strategies(json.dumps({"format": LESSON_FORMAT, "lesson": lesson}))
    with pytest.raises(LessonFileError, match="holds the “Prefill and decode” lesson"):
        import_strategies(json.dumps({"format": LESSON_FORMAT}))  # the first lesson's files name no lesson


# ---- the page ------------------------------------------------------------------------------------
def page_view(at) -> dict:
    """What the comparison tabs show: metrics, tables, and the texts with their divergence."""
    return {"metrics": {m.label: (m.value, m.delta) for m in at.metric},
            "tables": [t.value.to_dict() for t in at.dataframe],
            "texts": [m.value for m in at.markdown if "border-collapse" in m.value]}


def test_a_replayed_file_renders_the_same_tabs_with_no_model():
    live = open_lesson("lessons/cache_strategies.py")
    live.slider(key="strategies_max_tokens").set_value(3).run()
    next(b for b in live.button if b.label == "Run every strategy").click().run()
    assert not live.exception and not live.error
    lesson = live.session_state["strategies_run"]
    assert not lesson["replay"] and "Export lesson (JSON)" in [b.label for b in live.get("download_button")]

    file = import_strategies(export_strategies(lesson))
    played = open_lesson("lessons/cache_strategies.py")
    played.session_state["strategies_run"] = replayed(file)
    played.run()
    assert not played.exception
    banner = next(i.value for i in played.info if "Replaying a recorded comparison" in i.value)
    assert "3 tokens" in banner and "3 timed runs" in banner and plain(lesson["model"]) in banner
    buttons = {b.label: b.disabled for b in played.button}
    assert buttons["Run every strategy"] and buttons["Convert and measure"] and buttons["Run the eviction lab"]
    assert not buttons["Leave the replay"]
    assert len(played.get("plotly_chart")) == len(live.get("plotly_chart")) == 5
    assert page_view(played) == page_view(live)
    for label in ("static", "paged"):
        live.selectbox(key="strategies_bill_of").set_value(label).run()
        played.selectbox(key="strategies_bill_of").set_value(label).run()
        assert page_view(played) == page_view(live), label

    next(b for b in played.button if b.label == "Leave the replay").click().run()
    assert "strategies_run" not in played.session_state
    assert not next(b for b in played.button if b.label == "Run every strategy").disabled
