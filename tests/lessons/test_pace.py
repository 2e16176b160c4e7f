"""A server's estimates follow the pace it measured on its own clicks (kvviz.lessons.budget.Pace)."""

import time

import pytest
import torch

from kvviz.lessons import budget
from kvviz.lessons.budget import Pace, Work, pace, timed
from kvviz.lessons.prefill_decode.logic import Lesson, LessonSettings, lesson_sampling, lesson_work

CPU = torch.device("cpu")
FIXED = Work(0.0, steps=4, read_backs=4, click="lesson")  # 0.3 s at RATES, no FLOPs
COMPUTE = Work(8e10, steps=0, click="lesson")  # 2 s at RATES, no fixed cost


def test_a_server_that_timed_nothing_estimates_at_the_quiet_rates():
    rate = budget.RATES["cpu"]
    assert pace(CPU, "lesson").factors() == (1.0, 1.0)
    assert FIXED.seconds(CPU) == pytest.approx(4 * (rate.step_s + rate.read_back_s))
    assert COMPUTE.seconds(CPU) == pytest.approx(8e10 / rate.flops_per_s)
    assert "has not timed a click like it yet" in pace(CPU, "lesson").says()


def test_each_part_follows_its_own_reports():
    """Steps that ran 4x faster than RATES make step-bound work 4x cheaper, and leave FLOP-bound work at
    UNSEEN_LEAST of RATES at the least until it is timed itself; then FLOP-bound work that ran 2x slower doubles its own estimate only."""
    server = Pace()
    for _ in range(5):
        server.report(FIXED, CPU, FIXED.quiet_seconds(CPU)[1] / 4)
    compute, fixed = server.factors()
    assert fixed == pytest.approx(0.25, rel=0.1) and Pace.UNSEEN_LEAST <= compute <= 1.0
    for _ in range(3):
        server.report(COMPUTE, CPU, COMPUTE.quiet_seconds(CPU)[0] * 2)
    compute, fixed = server.factors()
    assert compute == pytest.approx(2.0, rel=0.1) and fixed == pytest.approx(0.25, rel=0.1)
    assert "last 8 clicks like it" in server.says()


def test_a_busy_server_slows_work_it_has_not_timed_as_well():
    server = Pace()
    for _ in range(3):
        server.report(FIXED, CPU, FIXED.quiet_seconds(CPU)[1] * 3)  # three times slower than RATES
    compute, fixed = server.factors()
    assert fixed == pytest.approx(3.0, rel=0.1) and compute == fixed


def test_old_reports_are_forgotten_and_short_ones_ignored():
    server = Pace()
    server.MEMORY_S = 0.2
    server.report(FIXED, CPU, 10.0)
    server.report(FIXED, CPU, 0.0001)  # under LEAST_S: too short to time
    assert server.reports == 1 and server.factors()[1] > 1.0
    time.sleep(0.3)
    assert server.factors() == (1.0, 1.0) and server.reports == 0


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
    lesson = Lesson.start(bundled, LessonSettings(prompt="ROMEO:", sampling=lesson_sampling(max_tokens=6)))
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
