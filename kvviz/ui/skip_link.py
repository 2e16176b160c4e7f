"""A skip link: the page's first stop for the keyboard, before the sidebar's pages and the model picker.

    skip_link()    # app.py, on every page

Tab once from the address bar and it shows, "Skip to the lesson's controls"; Enter moves the focus to the first
control of the page's lesson (a container keyed "lesson_controls": Prefill and decode's prompt or Next token,
the Paged lesson's and Speculative decoding's Step), else to the first control of the page's main part. Without
it a keyboard reached Prefill after 23 Tabs (issue 59). A Streamlit components-v2 component whose script puts
one link at the top of the document, once, styled inline (it lives outside the component's own styles).
"""

from __future__ import annotations

import streamlit as st

SKIP_JS = """
const HIDDEN = "position:absolute;left:-10000px;top:0;width:1px;height:1px;overflow:hidden;";
const SHOWN = "position:fixed;left:12px;top:12px;z-index:1000000;padding:10px 16px;background:#ffffff;" +
  "color:#1d3b66;border:3px solid #1d3b66;border-radius:6px;font:600 18px sans-serif;text-decoration:underline;";
// a control, not a help icon's button ("Help for ...")
const CONTROL = ":is(button, textarea, input, [role='combobox'], [role='slider'])" +
  ":not([disabled], [aria-label^='Help for'])";
const TARGETS = `.st-key-lesson_controls ${CONTROL}`;
const ANY = `[data-testid='stMain'] ${CONTROL}`;

export default function () {
  if (document.getElementById("kvviz-skip")) return;
  const link = document.createElement("a");
  link.id = "kvviz-skip";
  link.href = "#";
  link.textContent = "Skip to the lesson's controls";
  link.setAttribute("style", HIDDEN);
  link.addEventListener("focus", () => link.setAttribute("style", SHOWN));
  link.addEventListener("blur", () => link.setAttribute("style", HIDDEN));
  link.addEventListener("click", (event) => {
    event.preventDefault();
    const shown = (selector) => [...document.querySelectorAll(selector)].find((e) => e.getClientRects().length > 0);
    const target = shown(TARGETS) || shown(ANY); // a popover's folded controls are in the page, not on it
    if (target) target.focus();
  });
  document.body.prepend(link);
}
"""
_skip = st.components.v2.component("kvviz.skip_link", html="<span hidden></span>", js=SKIP_JS)


def skip_link() -> None:
    """Put the skip link at the top of the page (once per browser page: its script checks)."""
    _skip(key="skip_link")
