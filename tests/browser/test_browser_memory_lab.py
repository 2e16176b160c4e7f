"""The Memory bill and Model lab pages in a real browser: interact a little, keep screenshots."""

from app_reads import no_exceptions, pick
from chromium import open_tab, screenshot, wait_drawn


def open_page(page, app_url: str, path: str) -> None:
    """Open a lesson by its own address, as a bookmark or a shared link would."""
    page.goto(f"{app_url}/{path}")


def test_memory_bill_page(app_url, page):
    open_page(page, app_url, "memory_bill")
    wait_drawn(page, page.get_by_text("The formula, filled in"))
    no_exceptions(page)
    assert page.get_by_text("1.00 GiB").count() >= 1  # llama-3.1-8b, 8,192 tokens, bf16
    screenshot(page, "memory_bill")

    pick(page, "Start from a model", "gemma-2-9b", shows=page.get_by_text("sliding window:", exact=False))
    open_tab(page, "Per layer")
    no_exceptions(page)
    screenshot(page, "memory_bill_gemma_per_layer")

    open_tab(page, "MHA · GQA · MQA · MLA")
    no_exceptions(page)
    screenshot(page, "memory_bill_attention_variants")

    window = page.get_by_label("Sliding window in tokens (0: none)", exact=True)
    window.fill("100000")
    window.press("Enter")
    wait_drawn(page, page.get_by_text("is larger than the context"))
    no_exceptions(page)
    screenshot(page, "memory_bill_bad_window")

    pick(page, "Start from a model", "deepseek-v3",  # MLA, and weights far bigger than one H100
         shows=page.get_by_text("MLA latent:", exact=False))
    page.get_by_text("dtypes", exact=True).click()
    wait_drawn(page, page.get_by_text("Your model in every dtype", exact=False))  # the caption "dtypes" draws
    open_tab(page, "Against batch")
    no_exceptions(page)
    screenshot(page, "memory_bill_deepseek_dtypes")


def test_model_lab_page(app_url, page):
    open_page(page, app_url, "model_lab")
    wait_drawn(page, page.get_by_role("button", name="Measure"))
    no_exceptions(page)
    assert page.get_by_text("Model", exact=True).count() >= 1  # the app's sidebar, not a bare page
    page.get_by_role("button", name="Measure").click()
    wait_drawn(page, page.get_by_text("faster with the cache").first, timeout=180)
    no_exceptions(page)
    screenshot(page, "model_lab")

    page.get_by_role("slider", name="Query heads").press("ArrowLeft")  # 8 -> 7 heads: 256 does not divide
    wait_drawn(page, page.get_by_text("does not divide into 7 heads"))
    assert page.get_by_text("faster with the cache").count() >= 1  # the last results stay
    no_exceptions(page)
    screenshot(page, "model_lab_bad_heads")
