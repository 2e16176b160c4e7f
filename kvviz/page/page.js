// A lesson's web page: what Streamlit is to the stage in the app, done by the page itself (kvviz/page/build.py
// writes the page; the stage's own files come just above this, joined as the app joins them).
//
// The stage is called as Streamlit's components v2 calls it: with the data, the element it draws in (a shadow
// root holding its stylesheet, as in the app) and setStateValue, which the stage calls once the learner has
// moved it by hand; that pauses Play, as in the app. The page's own controls step it: Previous and Next, Play
// and Pause, the step slider, → (and ← from stage.js), Home and End, P, and presenter type; they follow the
// step the stage shows. Every text comes from the lesson's JSON and is written with textContent (dom.js html).

const PLAY_EVERY_MS = 700; // the app's Play at its "normal" speed
const lesson = JSON.parse(document.getElementById("kvviz-lesson").textContent);
const last = lesson.stage.steps.length - 1;
const byId = (id) => document.getElementById(id);

// ---- the stage, mounted as the app's component is ----------------------------------------------------
const shadow = byId("stage").attachShadow({ mode: "open" });
shadow.appendChild(byId("stage-template").content.cloneNode(true));
const stageRoot = shadow.querySelector(".kvviz-stage");
let presenter = false;
let player = null; // Play's timer, while it plays

let shownByPage = 0; // the step this page last asked the stage to show

function show(step) {
  shownByPage = Math.max(0, Math.min(last, step));
  mountStage({ name: "kvviz.stage", key: "page", data: { ...lesson.stage, step: Math.max(0, Math.min(last, step)), presenter },
               parentElement: shadow, setStateValue: movedByHand, setTriggerValue: () => {} });
}
function shownStep() {
  return Number(stageRoot.dataset.step || 0);
}
function movedByHand(name, step) { // the stage's report of a step the learner took in it (its ◀ ▶, its arrow keys)
  // a report lands 350 ms after the step it names: one that names the step this page showed since (Play's restart
  // from the end) is the page's own, and must not pause the Play that followed it
  if (name === "step" && step !== shownByPage) pause();
}

// ---- the page's controls follow the step the stage shows ---------------------------------------------
function follow() {
  const step = shownStep();
  const slider = byId("step");
  slider.value = String(step);
  slider.setAttribute("aria-valuetext", stageRoot.querySelector("[data-testid='stage-step']")?.textContent || `Step ${step}`);
  byId("previous").setAttribute("aria-disabled", String(step === 0)); // disabled would drop the keyboard's focus
  byId("next").setAttribute("aria-disabled", String(step === last));
  const answer = byId("answer");
  answer.replaceChildren();
  for (const line of lesson.answers[step]) {
    const row = html("div", { class: "line" }, answer);
    html("strong", {}, row, line.label);
    html("div", { class: "words" }, row, line.text.trimEnd() || "(nothing yet)");
  }
}
new MutationObserver(follow).observe(stageRoot, { attributes: true, attributeFilter: ["data-step"] });

function play() {
  if (shownStep() >= last) show(0);
  player = setInterval(() => (shownStep() >= last ? pause() : show(shownStep() + 1)), PLAY_EVERY_MS);
  byId("play").textContent = "⏸ Pause";
}
function pause() {
  clearInterval(player);
  player = null;
  byId("play").textContent = "▶ Play";
}
function stepTo(step) { // a step the learner chose with the page's controls
  pause();
  show(step);
}

byId("previous").onclick = () => stepTo(shownStep() - 1);
byId("next").onclick = () => stepTo(shownStep() + 1);
byId("play").onclick = () => (player ? pause() : play());
byId("step").max = String(last);
byId("step").oninput = () => stepTo(Number(byId("step").value));
byId("presenter").onchange = () => {
  presenter = byId("presenter").checked;
  document.body.classList.toggle("presenter", presenter);
  show(shownStep());
};
// → steps on from anywhere on the page (stage.js's listener does ←), unless a field or the slider has the
// keyboard, whose arrow keys are its own; the stage's own keys never reach here (it stops them)
document.addEventListener("keydown", (event) => {
  if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
  const target = event.composedPath()[0];
  if (target && target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
  const moves = { ArrowRight: shownStep() + 1, Home: 0, End: last };
  if (event.key in moves) stepTo(moves[event.key]);
  else if (event.key === "p" || event.key === "P") byId("play").click();
  else return;
  event.preventDefault();
});
// the stage measures its width as it draws (below 600 px it stacks, as a phone's): a new width draws it anew
let drawnWidth = byId("stage").clientWidth;
new ResizeObserver(() => {
  if (byId("stage").clientWidth === drawnWidth) return;
  drawnWidth = byId("stage").clientWidth;
  show(shownStep());
}).observe(byId("stage"));

// ---- what the page says about the lesson --------------------------------------------------------------
byId("title").textContent = lesson.title;
byId("recorded").textContent = `Recorded on ${lesson.model}, replayed here from its lesson file.`;
for (const prompt of lesson.prompts) {
  const box = html("div", { class: "prompt" }, byId("prompts"));
  html("div", { class: "label" }, box, prompt.label);
  html("pre", { tabindex: "0" }, box, prompt.text);
}
for (const line of lesson.settings) html("li", {}, byId("settings"), line);
if (window.matchMedia("(max-width: 600px)").matches) byId("about").open = false; // a phone: the stage first
show(lesson.stage.step);
follow();
performance.mark("kvviz-stage-drawn"); // the first step drawn: how long the page took to open
