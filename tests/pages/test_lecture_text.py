"""The lecture's text against the article and the public sources, and its order: nothing used before taught."""

import re
from pathlib import Path

from kvviz.lessons.cache_strategies import logic as strategies
from kvviz.lessons.lecture import LECTURE, by_key
from kvviz.lessons.sources.logic import SOURCES

from app_tests import ROOT, open_lesson

KEYS = [lesson.key for lesson in LECTURE]


def relative(script_path: str) -> str:
    return str(Path(script_path).relative_to(ROOT))


def shown(at) -> str:
    return "\n".join(m.value for m in at.markdown) + "\n" + "\n".join(c.value for c in at.caption)


def source(word: str):
    return next(s for s in SOURCES if word in s.title)


# ---- order -----------------------------------------------------------------------------------

def test_the_articles_arc_comes_first_and_each_lesson_after_the_ones_it_builds_on():
    arc = ["prefill_decode", "memory_bill", "paged_batching", "cache_strategies", "putting_it_together"]
    assert [KEYS.index(key) for key in arc] == sorted(KEYS.index(key) for key in arc)
    # Batch generation and Cache strategies run paged blocks; the closing page uses every lesson of the arc
    assert KEYS.index("paged_batching") < KEYS.index("batch_generation") < KEYS.index("putting_it_together")
    # Speculative decoding is beyond the article: after its arc, said so, and the sources close the list
    assert KEYS.index("putting_it_together") < KEYS.index("speculative") and KEYS[-1] == "sources"
    assert by_key("speculative").summary.startswith("Beyond the article")


def test_the_readme_lists_the_lecture_in_its_order():
    """Every lesson of the article's arc, in lecture order, and no title that is not a lesson: a lesson added
    later needs no README line to pass (the home page lists them all, from the lecture)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The lessons"):text.index("## Command line")]
    listed = re.findall(r"^\d+\. \*\*(.+?)\*\*", section, flags=re.MULTILINE)
    titles = [lesson.title for lesson in LECTURE[1:]]
    assert set(listed) <= set(titles)
    assert listed == sorted(listed, key=titles.index)
    arc = ["prefill_decode", "memory_bill", "paged_batching", "cache_strategies", "putting_it_together"]
    assert {by_key(key).title for key in arc} <= set(listed)


def test_prefill_and_decode_links_forward_to_where_its_early_words_are_taught():
    at = open_lesson("lessons/prefill_decode.py")
    next(b for b in at.button if b.label == "Prefill").click().run()
    here = KEYS.index("prefill_decode")
    expected = {"Memory bill": "paged_batching", "Attention": "memory_bill",
                "Why decode is memory-bound": "memory_bill"}
    for view, key in expected.items():
        at.radio(key="lesson_view").set_value(view).run()
        assert not at.exception, view
        forward = {relative(at._registered_pages[link.proto.page_script_hash]["script_path"]): link.proto.label
                   for link in at.get("page_link") if "taught in" in link.proto.label}
        lesson = by_key(key)
        assert forward.get(lesson.path, "").endswith(f"taught in {lesson.title} (lesson {KEYS.index(key)})"), forward
        assert KEYS.index(key) > here
    text = shown(at)
    assert "weights·V" not in text and "2 per multiplied parameter per token" in text  # "weights" meant parameters


# ---- the text ---------------------------------------------------------------------------------

def test_sources_credit_speculative_decoding_and_say_what_kvviz_runs():
    urls = {s.url for s in SOURCES if "Speculative decoding" in s.lessons}
    assert {"https://arxiv.org/abs/2211.17192", "https://arxiv.org/abs/2302.01318",
            "https://github.com/apoorvumang/prompt-lookup-decoding"} <= urls
    h2o, sinks = source("H2O"), source("StreamingLLM")
    assert "does not implement" not in h2o.idea and "Eviction lab runs it" in h2o.idea
    assert "Eviction lab runs it" in sinks.idea
    kivi = source("KIVI")
    assert "keys per channel and values per token" in kivi.idea
    assert "along head_dim within each token" in kivi.idea and "QuantizedCache" in kivi.idea
    assert "Conceptually" in source("MLA").idea and "rebuilt" not in source("MLA").idea
    assert "20.4-38.2%" in source("PagedAttention").idea
    assert "Unlike KIVI" in (ROOT / "kvviz/strategies/quantized.py").read_text(encoding="utf-8")  # "Show the code"
    assert "Putting it together" in {title for s in SOURCES for title in s.lessons}


def test_the_home_page_says_which_numbers_are_measured_and_which_computed():
    text = shown(open_lesson("lessons/home.py"))
    assert "every number here is measured" not in text
    computed = text[text.index("**Computed**"):]
    for page in ("Memory bill", "tensor-parallel", "roofline", "Putting it together"):
        assert page in computed, page


def test_the_paged_page_gives_the_vllm_papers_figure_and_the_slack():
    at = open_lesson("lessons/paged_batching.py")
    text = shown(at)
    assert "wastes most of it" not in text
    assert "20.4-38.2%" in text and "arxiv.org/abs/2309.06180" in text
    assert "60-80%" in text and "under 4%" in text
    assert "no memory is reserved that no token uses" not in text
    assert "the only unused room is the empty slots of each request's last block" in text
    analogy = at.table[0].value.to_dict("records")
    swapping = next(row["paged KV cache"] for row in analogy if "swapping" in row["operating system"])
    assert "swap mode" in swapping and "recompute" in swapping


def test_cache_strategies_states_its_reservation_the_window_caveat_and_compilation():
    assert strategies.static_reservation(512) == 512
    assert strategies.static_reservation(131_072) == strategies.STATIC_MOST_TOKENS == 4096
    static = strategies.lesson_specs(16, 32, 0, max_context=131_072)[1]
    assert static.options == {"capacity": 4096}
    text = shown(open_lesson("lessons/cache_strategies.py"))
    assert "reserves the whole context" not in text
    assert "a **static** one reserves 512 tokens up front" in text  # the bundled model's context
    assert "safe only in layers trained with one" in text
    assert "This model's layers all use full attention" in text
    assert "torch.compile" in text and "compiles well" in text
    assert "Every byte and millisecond below is measured" not in text


def test_speculative_says_when_more_tokens_cost_little_and_that_it_is_beyond_the_article():
    text = shown(open_lesson("lessons/speculative.py"))
    assert "While decode is memory-bound" in text and "costs little more" in text
    assert "Beyond the article" in text



def test_the_memory_bills_mla_sentence_says_rebuilding_is_conceptual():
    """Issue 23 item 18: DeepSeek's kernels fold the up-projections into the query and the output, so no
    per-head key or value is rebuilt in practice; the variants tab said MLA 'rebuilds' them."""
    text = shown(open_lesson("lessons/memory_bill.py"))
    sentence = next(line for line in text.split("\n") if "*Multi-head latent attention*" in line)
    assert "rebuilds each head's keys and values" not in sentence
    assert "Conceptually" in sentence and "fold" in sentence
