"""Issue 52: the Memory bill runs one text through SmolLM2 and Gemma 3 and shows what each engine's cache holds
beside the formula: Gemma 3's one KV head and 512-token window against SmolLM2's three KV heads and full layers.
Skipped where the two models are not fetched (scripts/test.sh fetches both)."""

import pytest

from kvviz.hub.fetch import fetched_folder
from kvviz.lessons.memory_bill.pair import PAIR

from app_tests import button, open_lesson

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(any(fetched_folder(name) is None for name in PAIR),
                                 reason="SmolLM2 and Gemma 3 are not both fetched here")]


def test_the_two_models_caches_measured_beside_the_formula():
    at = open_lesson("lessons/memory_bill.py")
    button(at, "Run up to 2,000 tokens through both").click().run(timeout=300)
    assert not at.exception and not at.error
    rows = at.session_state["bill_pair"]
    smol, gemma = rows
    assert (smol.heads, smol.kv_heads, gemma.heads, gemma.kv_heads) == (9, 3, 4, 1)
    for row in rows:  # the engine holds what the formula says, kind by kind (whole blocks of 16)
        assert all(kind.held_bytes == kind.formula_bytes for kind in row.kinds), row
    sliding = next(kind for kind in gemma.kinds if kind.window == 512)
    assert sliding.layers == 15 and sliding.held_bytes == 2 * 15 * 256 * 512 * 4  # the window alone, not 2,000
    assert smol.held_bytes > 3 * gemma.held_bytes  # twice the parameters, under a third of the cache
    table = "\n".join(m.value for m in at.markdown)
    assert "| gemma3 | 4 (4 over 1) | 3 full + 15 sliding (512) |" in table and "87.89 MiB" in table
