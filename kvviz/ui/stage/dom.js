// The stage's small helpers: making SVG and HTML nodes, bytes and tokens as the stage writes them.

const SVG = "http://www.w3.org/2000/svg";

function el(name, attrs = {}, parent = null, text = null) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function html(tag, attrs = {}, parent = null, text = null) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function formatBytes(n) {
  const units = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
  for (const [unit, size] of units) if (n >= size) return `${(n / size).toFixed(2)} ${unit}`;
  return `${n.toLocaleString("en-US")} bytes`;
}

function shown(text) {
  // a token as its chip and column show it: newlines and spaces made visible
  return text.replace(/\n/g, "⏎").replace(/ /g, "·") || "·";
}

function clipped(text, most) {
  return text.length > most ? `${text.slice(0, most - 1)}…` : text;
}

function plural(count, word, many = `${word}s`) {
  return `${count} ${count === 1 ? word : many}`;
}

function listed(items) {
  return items.length ? items.join(", ") : "none";
}

// hovering (or tapping) a node lights `target` everywhere; leaving it lights the pinned one again.
// Each target is also one stop of the keyboard's path through the stage (↑ and ↓, in drawing order).
function hoverable(node, ctx, target) {
  const key = JSON.stringify(target);
  if (!ctx.targetKeys.has(key)) { ctx.targetKeys.add(key); ctx.targets.push(target); }
  node.onmouseenter = () => ctx.hover(target);
  node.onmouseleave = () => ctx.hover(null);
  node.onclick = () => ctx.hover(target, true);
}
