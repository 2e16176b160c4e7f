// The stage: one living diagram of the KV cache, drawn in the browser.
//
// Python sends a whole lesson once (kvviz/ui/stage/__init__.py says the format). Stepping through
// recorded steps, hovering a token, a request or a block, and choosing a layer or head all happen
// here, without a server round trip; the step shown is reported back (setStateValue "step") a
// moment after the last change, so that the views below the stage follow it.
//
// What a step holds picks the picture: a step with `requests` draws several requests' block
// tables into one pool (requests.js); one with `attention` draws one request's cache layer by
// layer (cache.js); otherwise one request's blocks with a token in each slot and the step's
// drafts (blocks.js). dom.js holds the helpers; __init__.py joins the files in that order.
//
// Plain JavaScript and SVG, no build step and no request to any host.

const REPORT_AFTER_MS = 350; // a burst of arrow keys reports once

function stepName(d, index, last) {
  const word = d.step_word || "Step";
  const from = d.count_from || 0;
  const end = Math.max(last, d.last_step ?? last); // the lesson's last step, taken or not
  if (!d.step_word && index === 0 && d.steps[0].attention) return `Prefill (step 0 of ${end})`;
  // asked_last_step: where the lesson was to end; one that ended sooner (the model ended its answer, the
  // context filled) says so at its last step, where "Step 17 of 47" became "Step 18 of 18" without a word
  // (the step's sentence says why, and the caption's title how many steps were asked for)
  const early = d.asked_last_step > end && index === end ? ", ended early" : "";
  return `${word} ${index + from} of ${end + from}${early}`;
}

// The data comes whole, or (a room's follower, woken by the teacher's step) as JSON bytes holding the
// steps from `steps_from` on: the steps before, and the fields it lacks, are the ones this stage holds.
function received(raw, held) {
  const data = raw && typeof raw.byteLength === "number" ? JSON.parse(new TextDecoder().decode(raw)) : raw;
  if (data.steps_from === undefined) return data;
  if (!held || held.steps.length < data.steps_from) return null;
  return { ...held, ...data, steps: held.steps.slice(0, data.steps_from).concat(data.steps) };
}

// The browser's step outlives a stage drawn anew: Streamlit mounts the component again when the page around it
// changes shape, and the learner's steps taken in the browser went back to the server's. The same lesson at the
// same server step goes on where the learner was (one stage a page: one slot).
let kept = null; // { lesson, serverStep, step }
const lessonOf = (d) => `${d.steps.length}|${d.step_word || ""}|${d.count_from || 0}|${d.steps[0]?.sentence || ""}`;

export default function (component) {
  const { parentElement, setStateValue } = component;
  const root = parentElement.querySelector(".kvviz-stage");
  const mounted = !root.__stage; // a new stage element: the page was drawn anew around it, or a first stage
  const state = root.__stage || (root.__stage = { step: null, hover: null, pinned: null, layer: -1, head: -1, group: -1, band: null,
                                                  timer: null, reports: [], drawnStep: null });
  const data = received(component.data, state.data);
  if (!data) { // the whole data this builds on never came (a newer run's replaced it first): ask for it
    setStateValue("lost", Date.now());
    return;
  }
  state.data = data;
  const last = data.steps.length - 1;
  // the server's step wins when it moved (Next token, a link, a replay); else keep the browser's. A step this
  // stage reported, drawn back by the server, is no move: keys pressed since then went on from it (a learner's
  // keys on a busy server were pulled back to the step the report named). On a busy server several reports may
  // be on their way at once (a pause of REPORT_AFTER_MS between keys sends one), and the drawing of an earlier
  // one comes after a later one left: any report not yet drawn back is an echo, not only the last (the stage
  // went back from 42 to 31, keys lost, when it knew only the last)
  const moved = state.serverStep !== data.step;
  const echoed = state.reports.indexOf(data.step);
  if ((moved && echoed < 0) || state.step === null || state.step > last) state.step = data.step;
  // an echo is heard once and answers the reports sent before it too (the server runs them in order); a move
  // of the server's own forgets them all
  if (echoed >= 0) state.reports = state.reports.slice(echoed + 1);
  else if (moved) state.reports = [];
  if (mounted && kept && kept.lesson === lessonOf(data) && kept.serverStep === data.step && kept.step <= last) {
    state.step = kept.step;
  }
  state.serverStep = data.step;
  root.classList.toggle("presenter", !!data.presenter);

  const go = (step) => {
    const next = Math.max(0, Math.min(last, step));
    if (next === state.step) return;
    state.step = next;
    draw();
    clearTimeout(state.timer);
    root.dataset.reporting = "true"; // a report is on its way: the page is not idle yet
    state.timer = setTimeout(() => {
      delete root.dataset.reporting;
      if (state.reports[state.reports.length - 1] !== state.step) {
        state.reports.push(state.step);
        setStateValue("step", state.step);
      }
    }, REPORT_AFTER_MS);
  };
  state.go = go;
  // ↓ and ↑: pin the next (or the one before) of the step's tokens, requests and blocks, and say what it is
  state.visit = (by) => {
    const stops = state.targets || [];
    if (!stops.length) return;
    const at = stops.findIndex((target) => JSON.stringify(target) === JSON.stringify(state.pinned));
    const next = at < 0 ? (by > 0 ? 0 : stops.length - 1) : (at + by + stops.length) % stops.length;
    state.pinned = null;
    state.light(stops[next], true);
    state.live.textContent = state.readout();
  };

  if (!root.__keys) { // once per mounted stage: arrow keys step while the stage has the focus
    root.__keys = true;
    for (const gone of [...window.__kvvizStages].filter((other) => !other.isConnected)) window.__kvvizStages.delete(gone);
    window.__kvvizStages.add(root);
    root.setAttribute("tabindex", "0");
    root.setAttribute("role", "group");
    root.setAttribute("aria-label", "The lesson's stage: ← and → step through it; ↓ and ↑ go through its tokens, " +
                      "requests and blocks, each explained; Escape lets go");
    root.addEventListener("keydown", (event) => {
      const stage = root.__stage;
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        stage.visit(event.key === "ArrowDown" ? 1 : -1); event.preventDefault(); event.stopPropagation();
      }
      if (event.key === "Escape" && stage.pinned) {
        stage.pinned = null; stage.light(null); event.preventDefault(); event.stopPropagation();
      }
      if (event.key === "ArrowLeft") { stage.go(stage.step - 1); event.preventDefault(); event.stopPropagation(); }
      if (event.key === "ArrowRight") {
        // at the newest step, → asks for the next one, as the page's own step button does
        if (stage.step >= stage.data.steps.length - 1) pageStepButton()?.click();
        else stage.go(stage.step + 1);
        event.preventDefault(); event.stopPropagation();
      }
    });
  }

  function draw() {
    const d = state.data;
    const step = d.steps[state.step];
    const previous = state.drawnStep;
    state.drawnStep = state.step;
    kept = { lesson: lessonOf(d), serverStep: state.serverStep, step: state.step };
    const focused = focusKey(root); // a control pressed redraws the stage: the focus stays on its new self
    root.innerHTML = "";
    // one sentence a screen reader says at each step: a live region kept across redraws (the same node)
    state.live = state.live || html("div", { class: "sr-only", "aria-live": "polite", "data-testid": "stage-live" }, null);
    root.appendChild(state.live);
    root.dataset.step = String(state.step);
    root.classList.toggle("still", previous === state.step); // a redraw of the same step (the server's echo) plays nothing
    let readout = null;
    let view = null;
    const ctx = {
      d, step, root, state, grew: previous !== null && state.step === previous + 1,
      redraw: draw,
      targets: [], targetKeys: new Set(), // what can be lit, in drawing order: the keyboard's stops (dom.js hoverable)
      readoutIn(parent) { readout = html("span", { class: "readout", "data-testid": "stage-readout" }, parent); },
      // light `target` ({token}, {request} or {block}) everywhere; a tap pins it, a second tap unpins it
      hover(target, sticky = false) {
        if (sticky) state.pinned = JSON.stringify(state.pinned) === JSON.stringify(target) ? null : target;
        const shownTarget = target ?? state.pinned;
        state.hover = shownTarget;
        root.querySelectorAll(".lit").forEach((node) => node.classList.remove("lit"));
        const lit = shownTarget && view ? view.explain(shownTarget) : null;
        if (readout) readout.textContent = lit ? lit.text : view.idle;
        if (!lit) return;
        for (const selector of lit.lit) root.querySelectorAll(selector).forEach((node) => node.classList.add("lit"));
      },
    };

    // ---- the bar: step controls (layer and head where there is attention), the sentence -----------
    const bar = html("div", { class: "bar" }, root);
    const back = html("button", { class: "nav", "data-testid": "stage-back", title: "Step back (←)" }, bar, "◀");
    back.disabled = state.step === 0;
    back.onclick = () => go(state.step - 1);
    const where = html("span", { class: "where", "data-testid": "stage-step" }, bar, stepName(d, state.step, last));
    if (d.asked_last_step > last && state.step === last) {
      where.title = `${d.asked_last_step} steps were asked for; the step's sentence says why`;
    }
    const forward = html("button", { class: "nav", "data-testid": "stage-forward", title: "Step forward (→)" }, bar, "▶");
    forward.disabled = state.step === last;
    forward.onclick = () => go(state.step + 1);
    if (step.attention) attentionPicks(ctx, bar);
    if (step.sentence) html("div", { class: "sentence", "data-testid": "stage-sentence" }, root, step.sentence);

    view = step.requests ? drawRequests(ctx) : step.attention ? drawCache(ctx) : drawBlocks(ctx);
    state.targets = ctx.targets;
    state.light = ctx.hover;
    state.readout = () => (readout ? readout.textContent : "");
    ctx.hover(state.hover);
    const spoken = `${stepName(d, state.step, last)}. ${step.sentence || ""}`.trim();
    if (state.live.textContent !== spoken) state.live.textContent = spoken;
    if (focused) refocus(root, focused);
  }

  const firstDraw = state.drawnStep === null; // a new stage: the lesson's first step was just taken (Prefill, Start)
  draw();
  // a click that replaced the focused button (Prefill becomes Next token) leaves the focus on the page's body
  // once the page has redrawn: give it to the step button, so the keyboard goes on where the lesson goes on
  for (const wait of firstDraw ? [150, 600, 1500] : []) {
    setTimeout(() => {
      if (document.activeElement === document.body || document.activeElement === null) pageStepButton()?.focus({ preventScroll: true });
    }, wait);
  }
  return () => clearTimeout(state.timer);
}

// What names a control of the stage across a redraw (its test id, head, layer, KV head or label); null when the
// focus is not inside the stage. The stage lives in a shadow root: its own activeElement says what has the focus.
const FOCUS_ATTRIBUTES = ["data-testid", "data-head", "data-layer", "data-kv-head", "aria-label", "class"];
function focusKey(root) {
  const active = root.getRootNode().activeElement;
  if (!active || active === root || !root.contains(active)) return null;
  return { tag: active.tagName, attributes: FOCUS_ATTRIBUTES.map((name) => [name, active.getAttribute(name)])
    .filter(([name, value]) => value !== null && name !== "class"), text: active.textContent };
}
function refocus(root, key) {
  const same = [...root.querySelectorAll(key.tag)].filter((node) => key.attributes.every(([name, value]) => node.getAttribute(name) === value));
  const node = same.find((candidate) => candidate.textContent === key.text) || same[0];
  if (node && !node.disabled) node.focus({ preventScroll: true });
  else root.focus({ preventScroll: true }); // the control went (the last step's ▶): the stage keeps the keyboard
}

// ← steps back from anywhere on the page, as → (the page's Next token shortcut) steps on: unless a field, a
// slider or a menu has the keyboard, where the arrow keys are that control's own. One listener per page.
function stepBackFromPage(event) {
  if (event.key !== "ArrowLeft" || event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
  const target = event.composedPath()[0];
  if (target && target.closest && target.closest("input, textarea, select, [role='slider'], [role='listbox'], " +
                                                  "[role='combobox'], [role='tab'], [role='radio'], [contenteditable]")) return;
  if (target && target.closest && target.closest(".kvviz-stage")) return; // the stage's own listener has it
  const stage = [...(window.__kvvizStages || [])].find((root) => root.isConnected && root.__stage?.go);
  if (stage) { stage.__stage.go(stage.__stage.step - 1); event.preventDefault(); }
}
if (!window.__kvvizStages) { window.__kvvizStages = new Set(); document.addEventListener("keydown", stepBackFromPage); }

// the page's own button that takes the lesson's next step (Next token, Step), if it shows one
function pageStepButton() {
  // its label is one line of its text (an icon's ligature or a shortcut's key may share the button)
  const labels = ["Next token", "Step"];
  return [...document.querySelectorAll("button")].find((b) => !b.disabled && b.innerText.split("\n").some((line) => labels.includes(line.trim())));
}
