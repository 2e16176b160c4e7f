"""A server's estimates follow the pace it measured on its own clicks (kvviz.lessons.budget.Pace)."""

import time

import pytest
import torch

from kvviz.lessons import budget
from kvviz.lessons.budget import Pace, Work, factors, pace, says, timed
from kvviz.lessons.prefill_decode.logic import PrefillLesson, LessonSettings, lesson_sampling, lesson_work

CPU = torch.device("cpu")
FIXED = Work(0.0, steps=4, read_backs=4, click="lesson")  # 0.3 s at RATES, no FLOPs
COMPUTE = Work(8e10, steps=0, click="lesson")  # 2 s at RATES, no fixed cost


def test_a_server_that_timed_nothing_estimates_each_kind_at_its_quiet_pace():
    rate, (compute, fixed) = budget.RATES["cpu"], budget.QUIET_PACE[("cpu", "lesson")]
    assert factors(CPU, "lesson") == (compute, fixed)
    assert FIXED.seconds(CPU) == pytest.approx(4 * (rate.step_s + rate.read_back_s) * fixed)
    assert COMPUTE.seconds(CPU) == pytest.approx(8e10 / rate.flops_per_s * compute)
    assert "has not timed a click yet" in says(CPU, "lesson")


def test_each_part_follows_its_own_reports():
    """Steps that ran 4x faster than RATES make step-bound work 4x cheaper, and pull FLOP-bound work, of which
    they say nothing, along with them; then FLOP-bound work that ran 2x slower doubles its own estimate only."""
    server = Pace()
    for _ in range(5):
        server.report(FIXED, CPU, FIXED.quiet_seconds(CPU)[1] / 4)
    compute, fixed = server.factors()
    assert fixed == pytest.approx(0.25, rel=0.1) and compute == pytest.approx(0.25, rel=0.1)
    for _ in range(3):
        server.report(COMPUTE, CPU, COMPUTE.quiet_seconds(CPU)[0] * 2)
    compute, fixed = server.factors()
    assert compute == pytest.approx(2.0, rel=0.1) and fixed == pytest.approx(0.25, rel=0.1)
    assert server.reports == 8


def test_a_busy_server_slows_the_kinds_of_click_it_has_not_timed_as_well():
    """Lesson steps three times slower than their quiet pace: a comparison of strategies, never timed, is
    estimated three times its quiet pace too, and its bar says from what."""
    prior = budget.QUIET_PACE[("cpu", "lesson")]
    for _ in range(3):
        pace(CPU, "lesson").report(FIXED, CPU, FIXED.quiet_seconds(CPU)[1] * prior[1] * 3)
    assert factors(CPU, "lesson")[1] == pytest.approx(3 * prior[1], rel=0.1)
    quiet = budget.QUIET_PACE[("cpu", "strategies")]
    assert factors(CPU, "strategies") == pytest.approx((3 * quiet[0], 3 * quiet[1]), rel=0.01)
    assert "over its last 3 clicks of other kinds (3.0x a quiet server's time)" in says(CPU, "strategies")
    assert "last 3 clicks like it" in says(CPU, "lesson")


def test_a_steps_read_back_grows_with_the_context(bundled):
    """Next token deep in a long prompt copies out more K, V and attention: its estimate grows with the
    context, where FLOPs alone barely move (issue 49: 3x optimistic at 1,000 tokens)."""
    short, long = lesson_work(bundled, 20, 1), lesson_work(bundled, 400, 1)
    assert long.read_back_tokens > 10 * short.read_back_tokens
    assert long.quiet_seconds(CPU)[1] > 1.5 * short.quiet_seconds(CPU)[1]


def test_old_reports_are_forgotten_and_short_ones_ignored():
    server = Pace()
    server.MEMORY_S = 0.2
    server.report(FIXED, CPU, 10.0)
    server.report(FIXED, CPU, 0.0001)  # under LEAST_S: too short to time
    assert server.reports == 1 and server.factors()[1] > 1.0
    time.sleep(0.3)
    assert server.factors() == server.prior == (1.0, 1.0) and server.reports == 0


def test_a_block_that_raises_reports_nothing():
    with pytest.raises(RuntimeError):
        with timed(FIXED, CPU):
            raise RuntimeError("stopped")
    assert pace(CPU, "lesson").reports == 0
    with timed(FIXED, CPU):
        time.sleep(0.02)
    assert pace(CPU, "lesson").reports == 1


def test_a_lesson_times_each_step_as_the_link_estimate_counts_it(bundled):
    """Each prefill and decode step reports its own work; together they are the work a link to that step is
    estimated by, so that the link's estimate learns from the steps the teacher clicked."""
    lesson = PrefillLesson.start(bundled, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=6)))
    works = []
    for _ in range(4):
        works.append(lesson.step_work(lesson.twin_runs_next()))
        lesson.next_token()
    assert pace(CPU, "lesson").reports == 4
    assert pace(CPU, "strategies").reports == 0  # each kind of click learns apart
    whole = lesson_work(bundled, len(lesson.prompt_token_ids), 3)
    added = sum(works, Work())
    assert added.flops == pytest.approx(whole.flops) and added.steps == whole.steps
    assert added.read_backs == whole.read_backs
