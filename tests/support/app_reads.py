"""What the browser tests read from the app's page, and how they choose in its select boxes: one definition
each, for every browser test file."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from chromium import wait_drawn


def metric_box(page, label: str):
    """The st.metric whose label is exactly `label` (a locator)."""
    return page.locator("[data-testid='stMetric']").filter(has=page.get_by_text(label, exact=True))


def metric(page, label: str) -> str:
    """The value the metric labelled `label` shows ("12", "2.00 GiB")."""
    return metric_box(page, label).locator("[data-testid='stMetricValue']").first.inner_text().strip()


def metric_delta(page, label: str) -> str:
    """The delta line under the metric labelled `label` ("3 if separate")."""
    return metric_box(page, label).locator("[data-testid='stMetricDelta']").first.inner_text().strip()


def metric_shows(page, label: str, value: str):
    """The metric labelled `label` while it shows `value` (a locator, empty while it shows another): what a
    run that sets the metric to `value` draws, to wait on (wait_drawn)."""
    return metric_box(page, label).locator("[data-testid='stMetricValue']").filter(
        has_text=re.compile(f"^{re.escape(value)}$"))


def metrics(page) -> list[str]:
    """Every metric value on the page, in order."""
    return page.locator("[data-testid='stMetricValue']").all_inner_texts()


def pick(page, label: str, option: str, shows) -> None:
    """Choose `option` in the select box labelled `label`, then wait for what its run draws (`shows`, a
    locator only that run can match: wait_drawn). Choosing what is already chosen runs nothing: no wait."""
    box = page.get_by_role("combobox", name=label).first  # not the label's help icon
    if box.input_value() == option:
        return
    box.click()
    page.get_by_role("option", name=option, exact=True).click()
    expect(box).to_have_value(option)
    wait_drawn(page, shows)


def no_exceptions(page) -> None:
    """Expect the page to show no exception and no traceback."""
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator("text=Traceback").count() == 0


def view_shows(page, view: str):
    """What only the Prefill and decode page's run for `view` draws (one of its View radio's options,
    kvviz.lessons.prefill_decode.state.VIEWS): the locator to wait on after choosing it."""
    return {"Cache per layer": page.get_by_text(re.compile(r"^Every position costs")),
            "Keys and values": page.get_by_role("combobox", name="KV head"),
            # its caption, GQA's or MLA's (the stage has a label "9 query heads share 3 KV heads:" too)
            "Attention": page.get_by_test_id("stCaptionContainer").filter(has_text=re.compile(r"^\d+ query heads")),
            "Inside attention": page.get_by_role("heading", name=re.compile("Where q, k and v come from")),
            "Work saved": metric_box(page, "Tokens run, with cache"),
            "Memory bill": metric_box(page, "Blocks in use"),
            "Why decode is memory-bound": page.get_by_role("combobox", name="Accelerator")}[view]
