"""axe-core (the copy the axe-playwright-python wheel carries) over a page: its serious and critical violations of
the WCAG 2.0-2.2 A and AA rules. A test module that imports this is skipped where the wheel is not installed."""

from pathlib import Path

import pytest

axe_module = pytest.importorskip("axe_playwright_python", reason="axe-playwright-python is in requirements-dev.txt")
AXE_JS = Path(axe_module.__file__).with_name("axe.min.js")
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
AXE_RUN = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}});
  return result.violations.filter(v => ['serious', 'critical'].includes(v.impact))
    .map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 4).map(n => n.target.join(' ') + ' :: ' +
                                                                      (n.failureSummary || '').slice(0, 160))}));
}"""


def violations(page) -> list:
    """axe-core's serious and critical violations on the page as it is now (id, impact, a few nodes)."""
    page.add_script_tag(path=str(AXE_JS))
    return page.evaluate(AXE_RUN, TAGS)
