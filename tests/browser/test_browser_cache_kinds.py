"""Issue 26's cache kinds in a real browser at 1280x720, in normal and presenter mode: every number
the page shows for them is checked against the engine run directly in this test.

1. Memory bill, fp8 cache dtype, DeepSeek-V3 preset: the engine's measured bytes per token for the
   bundled model (auto, int8, fp8) equal kvviz.engine.cache_dtype.measured_bytes_per_token, and the MLA
   note's bytes per token and layer equal CacheShape.from_model(tiny MLA).bytes_per_token // layers.
2. Prefill and decode on the tiny MLA model, loaded from the sidebar as a student would: Prefill and
   three Next token; "Cache per layer" says the engine's bytes per token; "Keys and values" shows the
   cached latent rows.
In presenter mode no text in these views is under 16 px (TEXTS_JS, tests/support/page_texts.py).

The third kind, sliding-window layer groups (the built-in tiny-gemma3 on the Paged page), is driven in
test_browser_sliding_groups.py.
"""

import re

import pytest

from kvviz.engine.cache_dtype import measured_bytes_per_token
from kvviz.engine.engine import Engine
from kvviz.engine.sampling import SamplingParams
from kvviz.engine.kv_cache import CacheShape
from kvviz.lessons.prefill_decode.state import DEFAULTS

from kvviz.models import TINY_MLA, load_model
from kvviz.shapes import PRESETS, format_bytes

from app_reads import no_exceptions, pick
from chromium import SLOW_S, browser_page, click_to_next_step, stage_caption, wait_drawn
from lesson_steps import start_on_model
from page_texts import TEXTS_JS

MODES = pytest.mark.parametrize("presenter", [False, True], ids=["normal", "presenter"])
PRESENTER_LEAST_PX = 16


@pytest.fixture(scope="module")
def tiny_mla():
    """The tiny MLA model as the app builds it on this machine (CPU, float32)."""
    return load_model(TINY_MLA, device="cpu")


def main_text(page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not on the page:\n{text[:3000]}"
    return int(found.group(1).replace(",", ""))


def small_texts(page) -> list[str]:
    """Every visible text of the main area under 16 px, with its size."""
    page.evaluate("() => document.activeElement?.blur()")
    page.mouse.move(1279, 719)
    texts = page.evaluate(TEXTS_JS)
    assert texts, "no text found in the main area"
    return sorted({f"{t['size']} px: {t['text']!r}" for t in texts if t["size"] < PRESENTER_LEAST_PX - 0.05})


@MODES
def test_memory_bill_fp8_and_mla_notes_show_the_engines_bytes(app_url, presenter, tiny_mla):
    with browser_page(1280, 720) as page:
        page.goto(f"{app_url}/memory_bill" + ("?presenter=1" if presenter else ""))
        wait_drawn(page, page.get_by_text("The formula, filled in"), timeout=SLOW_S)
        # DeepSeek-V3 is an MLA model: its run adds the MLA note, which no other preset's bill has
        pick(page, "Start from a model", "deepseek-v3", shows=page.get_by_text("bytes per token and layer"))
        page.get_by_role("slider", name="Cache dtype").press("ArrowRight")  # bf16 -> fp8
        # the 8-bit rows measured in the engine: drawn at fp8 only (the MLA note is measured in the engine too)
        wait_drawn(page, page.get_by_text("Measured in kvviz's engine on the bundled model"), timeout=SLOW_S)
        no_exceptions(page)
        text = main_text(page)

        bundled = PRESETS["bundled"]
        for label, engine_dtype in (("auto \\(fp32\\)", "auto"), ("int8", "int8"), ("fp8", "fp8")):
            shown = number(rf"{label} ([\d,]+) bytes \(formula", text)
            assert shown == measured_bytes_per_token(bundled, engine_dtype), (engine_dtype, shown)
        shape = CacheShape.from_model(tiny_mla.model)
        per_layer = shape.bytes_per_token // tiny_mla.shape.num_layers
        assert number(r"holds ([\d,]+) bytes per token and layer", text) == per_layer
        assert "tiny MLA (random DeepSeek-V3)" in text
        if presenter:
            assert not small_texts(page), small_texts(page)


@MODES
def test_prefill_and_decode_on_tiny_mla_shows_latent_rows_and_its_bytes(app_url, presenter, tiny_mla):
    with browser_page(1280, 720) as page:
        start_on_model(page, f"{app_url}/prefill_decode", "Prefill", TINY_MLA, "tiny MLA (random DeepSeek-V3)",
                       presenter)
        for _ in range(3):
            click_to_next_step(page, page.get_by_role("button", name=re.compile("^Next token")), timeout=SLOW_S)
        stage_caption(page).get_by_text(re.compile(r"^Step 3 of \d+$")).wait_for()
        no_exceptions(page)

        engine = Engine(tiny_mla, block_size=16, max_num_seqs=1)  # the engine itself, run here
        shape = engine.cache_shape
        prompt_tokens = len(engine.check_request(DEFAULTS["lesson_prompt"], SamplingParams()))
        info = tiny_mla.describe()
        views = page.locator("[data-testid='stMain'] [role='radiogroup']")
        views.get_by_text("Cache per layer", exact=True).click()  # the first view, already shown: this runs nothing
        wait_drawn(page, page.get_by_text("Every position costs"))
        text = main_text(page)
        formula = (f"{info['layers']} layers × ({info['kv_lora_rank']} latent + {info['qk_rope_head_dim']} RoPE) "
                   f"values × {info['dtype_bytes']} bytes")
        assert f"Every position costs {format_bytes(shape.bytes_per_token)}: {formula}" in text, text[:3000]
        assert info["layers"] * (info["kv_lora_rank"] + info["qk_rope_head_dim"]) * info["dtype_bytes"] \
            == shape.bytes_per_token
        small = small_texts(page) if presenter else []

        views.get_by_text("Keys and values", exact=True).click()
        wait_drawn(page, page.get_by_text("This model uses multi-head latent attention (MLA)"), timeout=SLOW_S)
        no_exceptions(page)
        page.get_by_text("Latent + RoPE key (cached)", exact=False).first.wait_for()
        text = main_text(page)
        assert (f"a {info['kv_lora_rank']}-value latent and a {info['qk_rope_head_dim']}-value rotary key "
                f"shared by all {info['heads']} heads") in text, text[:3000]
        # the latent heatmap: one row per cached token (prompt and three decoded), latent + RoPE columns wide
        rows = page.evaluate("""() => {
          for (const plot of document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')) {
            if ((plot.querySelector('.gtitle')?.textContent || '').includes('Latent'))
              return Array.from(plot._fullData[0].z, row => row.length);  // z decoded: rows of values
          }
          return null;
        }""")
        assert rows, "no latent heatmap found"
        assert len(rows) == prompt_tokens + 3, rows  # the prompt's rows and three decoded tokens'
        assert set(rows) == {shape.head_dim} == {info["kv_lora_rank"] + info["qk_rope_head_dim"]}, rows
        if presenter:
            small += small_texts(page)
            assert not small, small
