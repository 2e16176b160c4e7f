"""What the browser tests measure of the text on a page, as JavaScript for Playwright's evaluate: the texts cut by
their box (CUT_TEXT_JS), every visible text with its rendered size (TEXTS_JS), and the smallest font inside the
stage (SMALLEST_FONT_JS, evaluated on the stage's element)."""

# Text elements whose content is wider than their box while the box clips it (hidden, clip, ellipsis).
CUT_TEXT_JS = """() => [...document.querySelectorAll('[data-testid="stMain"] *')].filter(e => {
    const text = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!text || e.clientWidth === 0) return false;
    const style = getComputedStyle(e);
    const clips = ['hidden', 'clip'].includes(style.overflowX) || style.textOverflow === 'ellipsis';
    return clips && e.scrollWidth > e.clientWidth + 1;
  }).map(e => e.textContent.trim().slice(0, 60))"""

# Every visible text under the main area (shadow roots too, so the stage's): its rendered size in px (an SVG
# text's computed size times its screen scale), its words, and whether it is chart text (Plotly's SVG).
TEXTS_JS = r"""() => {
  const found = [];
  const walk = (root) => {
    for (const node of root.querySelectorAll('*')) {
      if (node.shadowRoot) walk(node.shadowRoot);
      const text = [...node.childNodes].filter(c => c.nodeType === 3).map(c => c.textContent).join('')
        .replace(/[\u200b-\u200d\u2060\ufeff]/g, '').trim();  // zero-width marks are not text
      if (!text || !node.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
      const box = node.getBoundingClientRect();
      if (box.width < 2 || box.height < 2) continue;  // a screen reader's 1 px copy, not seen
      let size = parseFloat(getComputedStyle(node).fontSize);
      if (node instanceof SVGElement && node.getScreenCTM()) {
        const m = node.getScreenCTM();
        size *= Math.sqrt(Math.abs(m.a * m.d - m.b * m.c));
      }
      const chart = node.closest('.js-plotly-plot');
      found.push({text: text.slice(0, 50), size: Math.round(size * 10) / 10, chart: !!chart});
    }
  };
  walk(document.querySelector('[data-testid="stMain"]'));
  // a data frame draws its cells on a canvas, in the font its grid's style names
  for (const grid of document.querySelectorAll('[data-testid="stMain"] .stDataFrameGlideDataEditor')) {
    if (!grid.checkVisibility()) continue;
    const header = grid.querySelector('th')?.textContent || '';
    for (const part of ['header', 'base']) {
      const style = getComputedStyle(grid).getPropertyValue(`--gdg-${part}-font-style`);  // "400 17.5px"
      const size = parseFloat(style.match(/([\d.]+)px/)[1]);
      found.push({text: `data frame ${part === 'header' ? 'headers' : 'cells'} (${header} …)`, size, chart: false});
    }
  }
  return found;
}"""

# the smallest font of any visible text inside the stage (HTML and SVG)
SMALLEST_FONT_JS = """(stage) => {
  let smallest = 1000;
  for (const node of [stage, ...stage.querySelectorAll('*')]) {
    const own = [...node.childNodes].some(c => c.nodeType === 3 && c.textContent.trim());
    if (!own || !node.getClientRects().length) continue;
    smallest = Math.min(smallest, parseFloat(getComputedStyle(node).fontSize));
  }
  return smallest;
}"""
