"""The "Batch generation" page in a real browser, with screenshots. (Cache strategies' run, each of its tabs
and the GQA conversion are walked at the page's defaults in test_browser_lecture_stepped.py.)"""

from app_reads import no_exceptions
from chromium import SLOW_S, open_tab, screenshot, wait_drawn


def tab_shot(page, name, shot):
    open_tab(page, name)
    no_exceptions(page)
    screenshot(page, shot)


def press_and_shoot(page, button, shows, shot):
    """Click a button, expect `shows` on the page (text only its run draws), wait for the run to end; no
    exception; a screenshot."""
    page.get_by_role("button", name=button).click()
    wait_drawn(page, page.get_by_text(shows).first, timeout=SLOW_S)
    no_exceptions(page)
    screenshot(page, shot)


def test_batch_generation_page(app_url, page, tmp_path):
    page.goto(f"{app_url}/batch_generation")
    wait_drawn(page, page.get_by_role("button", name="Run the batch"))
    press_and_shoot(page, "Run the batch", "requests in", "batch_over_time")
    tab_shot(page, "Requests", "batch_requests")
    tab_shot(page, "Results", "batch_results")
    assert page.get_by_role("button", name="Download the results (JSONL)").count() == 1
    open_tab(page, "Against transformers generate")
    press_and_shoot(page, "Run both and compare", "Outputs identical", "batch_compare")

    # a binary file named .txt: one sentence, the Run button off, the results still there
    page.get_by_test_id("stRadioGroup").get_by_text("Upload a file").click()
    wait_drawn(page, page.get_by_text("Nothing uploaded yet."))  # the uploader, in place of the sliders
    binary = tmp_path / "prompts.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(binary))
    wait_drawn(page, page.get_by_text("prompts.txt is not UTF-8 text"))
    assert page.locator("[data-testid='stAlertContentError']").count() == 1
    assert page.get_by_role("button", name="Run the batch").is_disabled()
    assert page.get_by_text("requests in").count() >= 1
    no_exceptions(page)
    screenshot(page, "batch_binary_upload")
