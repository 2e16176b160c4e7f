"""Issue 25, "A budget per click": a link to Prefill and decode at a late step and Cache strategies'
"Run every strategy" are estimated before any work (kvviz.lessons.budget), like Batch generation's and
Model lab's clicks. Past the budget the link opens the lesson at the furthest step the budget allows
and says so, a prefill alone past it is refused, and the button runs nothing and keeps the results."""

import re
import time

import torch
from streamlit.testing.v1 import AppTest

from kvviz.lessons import budget
from kvviz.lessons.budget import Rate
from kvviz.lessons.cache_strategies.logic import comparison_work, lesson_specs
from kvviz.lessons.cache_strategies.state import DEFAULTS, EXAMPLE_PROMPT
from kvviz.lessons.prefill_decode.logic import furthest_step, lesson_work
from kvviz.lessons.prefill_decode.state import DEFAULTS as LESSON_DEFAULTS, EXAMPLE_PROMPTS

from app_tests import ROOT, button, one_sentence, shown

CPU = torch.device("cpu")


def open_link(step: int, prompt: str = EXAMPLE_PROMPTS[0]) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.query_params["prompt"] = prompt
    at.query_params["step"] = str(step)
    at.run()
    at.switch_page("lessons/prefill_decode.py").run()
    assert not at.exception
    return at


def prompt_tokens(lm, prompt: str) -> int:
    return len(lm.tokenizer(prompt)["input_ids"])


# ---- (a) a link to Prefill and decode ------------------------------------------------------------
def test_the_furthest_step_of_a_link_is_the_last_whose_estimate_fits(bundled, monkeypatch):
    """The README's case, 250 prompt tokens to step 255: with a budget of half its estimate the link reaches
    the last step estimated within it, and the estimate grows with the step and with the prompt."""
    whole = lesson_work(bundled, 250, 255).seconds(CPU)
    assert lesson_work(bundled, 250, 100).seconds(CPU) < whole and lesson_work(bundled, 100, 255).seconds(CPU) < whole
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", f"{whole / 2}")
    reachable = furthest_step(bundled, 250, 255, CPU)
    assert 0 < reachable < 255
    assert (lesson_work(bundled, 250, reachable).seconds(CPU) <= whole / 2
            < lesson_work(bundled, 250, reachable + 1).seconds(CPU))


def test_a_link_past_the_budget_opens_the_furthest_step_it_allows(bundled, monkeypatch):
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", "2")
    started = time.perf_counter()
    at = open_link(255)
    assert time.perf_counter() - started < 60  # under load: the estimate's 2 s, with a page drawn
    assert len(at.error) == 1
    message = shown(at.error[0])
    assert one_sentence(message)
    # the furthest step the estimate allows, at the pace the server had then; or, where the run went slower
    # than that pace (a test beside it), the step it reached when the budget's seconds ran out
    estimated = re.fullmatch(r"Step 255 would take about [\d.,]+ s to reach on this server, more than the 2 s one "
                             r"click may take, so the lesson stops at step (\d+); press Next token or Play to go on "
                             r"from there\.",
                             message)
    ran_out = re.fullmatch(r"Stopped at step (\d+) after 2 s, the 2 s one click may take on this server \(it is "
                           r"busier than the estimate assumed\); press Next token or Play to go on from there\.",
                           message)
    assert estimated or ran_out, message
    reachable = int((estimated or ran_out).group(1))
    assert 0 < reachable < 255
    assert len(at.session_state["lesson_run"].records) - 1 == reachable  # stopped there, not at 255
    button(at, "Next token").click().run()  # and the lesson goes on from there
    assert len(at.session_state["lesson_run"].records) - 1 == reachable + 1


def test_a_link_whose_prefill_alone_is_past_the_budget_runs_nothing(monkeypatch):
    monkeypatch.setitem(budget.RATES, "cpu", Rate(1e6, 0.05, 0.025, 1.5e-4))  # a server a million times slower
    at = open_link(10)
    assert "lesson_run" not in at.session_state
    assert len(at.error) == 1
    message = shown(at.error[0])
    assert one_sentence(message) and message.startswith("This lesson's prefill would run about")
    assert message.endswith("one click may take; use a shorter prompt.")


def test_a_link_within_the_budget_reaches_its_step(bundled):
    """The page's default: 48 tokens, so a link to its last step, 47, opens there and says nothing."""
    last = LESSON_DEFAULTS["lesson_max_tokens"] - 1
    assert furthest_step(bundled, prompt_tokens(bundled, EXAMPLE_PROMPTS[0]), last, CPU) == last
    at = open_link(last)
    assert len(at.session_state["lesson_run"].records) - 1 == last
    assert not at.error


# ---- (b) Run every strategy ----------------------------------------------------------------------
def test_the_largest_comparison_is_estimated_past_the_budget_and_the_default_within(bundled):
    """The README's case, 128 tokens after 380 prompt tokens, ran 71 s (121 CPU s)."""
    specs = lesson_specs(DEFAULTS["strategies_window"], DEFAULTS["strategies_group_size"],
                         DEFAULTS["strategies_residual"], bundled.max_context)
    assert comparison_work(bundled, 380, 128, specs, 3).seconds(CPU) > budget.CLICK_SECONDS
    default = comparison_work(bundled, prompt_tokens(bundled, EXAMPLE_PROMPT), DEFAULTS["strategies_max_tokens"],
                              specs, 3)
    assert default.seconds(CPU) < budget.CLICK_SECONDS


def test_run_every_strategy_past_the_budget_runs_the_most_tokens_that_fit_and_says_so(monkeypatch):
    """A deep model at the page's defaults (SmolLM2: 32 tokens estimated about 125 s here) ran nothing and said
    "ask for fewer tokens"; now it runs the most tokens under one click's budget, and says how many."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.run()
    at.switch_page("lessons/cache_strategies.py").run()
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", "5")
    started = time.perf_counter()
    button(at, "Run every strategy").click().run()
    assert time.perf_counter() - started < 60
    assert not at.exception and not at.error
    ran = at.session_state["strategies_run"]["settings"]["max_tokens"]
    assert 1 <= ran < DEFAULTS["strategies_max_tokens"]
    note = shown(next(i for i in at.info if "the most that fit" in shown(i)))
    assert one_sentence(note)
    assert note.startswith(f"{DEFAULTS['strategies_max_tokens']} tokens would take about ")
    assert f"more than the 5 s one click may take, so every strategy ran {ran} tokens, the most that fit" in note
    assert all(len(r.token_ids) == ran for r in at.session_state["strategies_run"]["results"])


def test_the_eviction_lab_past_the_budget_runs_the_most_tokens_that_fit_and_says_so(monkeypatch):
    """SmolLM2 at the page's defaults (32 tokens, estimated 30 s) was refused; now the lab runs the most tokens
    under one click's budget, and says how many."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.run()
    at.switch_page("lessons/cache_strategies.py").run()
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", "1")
    button(at, "Run the eviction lab").click().run()
    assert not at.exception and not at.error
    lab = at.session_state["strategies_eviction_run"]["lab"]
    ran = len(lab.runs[0].token_ids)
    assert 1 <= ran < DEFAULTS["strategies_max_tokens"] and all(len(r.token_ids) == ran for r in lab.runs)
    note = shown(next(i for i in at.info if "the most that fit" in shown(i)))
    assert one_sentence(note)
    assert note.startswith(f"{DEFAULTS['strategies_max_tokens']} tokens would take about ")
    assert f"more than the 1 s one click may take, so the lab ran {ran} tokens, the most that fit" in note


def test_run_every_strategy_past_the_budget_at_one_token_runs_nothing_and_keeps_the_results(monkeypatch):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=240)
    at.run()
    at.switch_page("lessons/cache_strategies.py").run()
    at.slider(key="strategies_max_tokens").set_value(3).run()
    button(at, "Run every strategy").click().run()
    assert not at.exception and not at.error
    results = at.session_state["strategies_run"]
    monkeypatch.setenv("KVVIZ_CLICK_SECONDS", "1")
    at.text_area(key="strategies_prompt").set_value(
        " ".join(["But soft, what light through yonder window?"] * 40)).run()
    started = time.perf_counter()
    button(at, "Run every strategy").click().run()
    assert time.perf_counter() - started < 30  # nothing ran
    assert not at.exception and len(at.error) == 1
    message = shown(at.error[0])
    assert one_sentence(message)
    assert message.startswith("Running every strategy for 3 tokens after this")
    assert "more than the 1 s one click may take; ask for fewer tokens or use a shorter prompt." in message
    assert at.session_state["strategies_run"] is results  # the earlier comparison stays


def test_an_estimate_past_the_budget_reads_past_it():
    """The Eviction lab on SmolLM2 said "would take about 30 s ..., more than the 30 s one click may take":
    an estimate of 30.4 s rounded to the budget it exceeded."""
    assert budget.over(30.4, 30) == "30.4" and budget.over(30.04, 30) == "30.04" and budget.over(136.2, 30) == "136"
    assert float(budget.over(30.0001, 30)) > 30
