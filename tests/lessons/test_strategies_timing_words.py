"""Issue 59 item 4: under load Cache strategies' Table showed no cache (161.8 ms) beside the full cache (142.4 ms),
the lesson's opposite, as if it were a finding. A strategy's step time is called faster or slower than the full
cache's only when their spreads do not overlap; otherwise it is within this run's noise, and the Time tab says so."""

from dataclasses import replace

from kvviz.lessons.cache_strategies.logic import beside_full_cache, compare_strategies, comparison_table, lesson_specs
from kvviz.lessons.cache_strategies.state import DEFAULTS, EXAMPLE_PROMPT


def test_an_ordering_is_claimed_only_outside_the_noise(bundled):
    specs = lesson_specs(DEFAULTS["strategies_window"], DEFAULTS["strategies_group_size"],
                         DEFAULTS["strategies_residual"], bundled.max_context)[:3]
    results = compare_strategies(bundled, EXAMPLE_PROMPT, 4, specs, 2)
    full, other = results[0], results[1]
    assert beside_full_cache(full, full) == "(the full cache)"

    def said(times: list[float], full_times: list[float]) -> str:
        return beside_full_cache(replace(other, decode_ms=times), replace(full, decode_ms=full_times))

    assert said([160.0, 170.0], [140.0, 165.0]) == "within noise"  # the load's case: a higher median, runs overlap
    assert said([160.0, 170.0], [140.0, 150.0]) == "slower"
    assert said([100.0, 120.0], [140.0, 150.0]) == "faster"
    words = [row["step time vs the full cache"] for row in comparison_table(results)]
    assert words[0] == "(the full cache)" and set(words[1:]) <= {"faster", "slower", "within noise"}
