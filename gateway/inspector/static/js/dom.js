// Small DOM helpers: build elements, show the message bar, format times.

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = value;
    else if (name === "dataset") Object.assign(element.dataset, value);
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : value);
  }
  append(element, children);
  return element;
}

export function append(element, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (value !== null && value !== undefined) element.setAttribute(name, value);
  }
  append(element, children);
  return element;
}

export function replace(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

export const $ = (selector) => document.querySelector(selector);

export function showMessage(text, kind = "error") {
  const bar = $("#message");
  bar.textContent = text;
  bar.dataset.kind = kind;
  bar.hidden = false;
}

export function clearMessage() {
  const bar = $("#message");
  bar.hidden = true;
  bar.textContent = "";
}

export function when(epochSeconds) {
  if (!epochSeconds) return "–";
  return new Date(epochSeconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function ago(epochSeconds) {
  const seconds = Math.max(0, Date.now() / 1000 - epochSeconds);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

export function clip(text, length = 120) {
  const flat = String(text ?? "").replace(/\s+/g, " ").trim();
  return flat.length > length ? `${flat.slice(0, length - 1)}…` : flat;
}

export function number(value, digits = 2) {
  return typeof value === "number" ? value.toFixed(digits) : "–";
}

// A turn as people count it: the API's `turn` is 0-based (the first turn is 0), the page — like
// the CLI's "turn 1 of 10" and every count of turns — says "turn 1" for it.
export function turnLabel(turn) {
  return typeof turn === "number" ? `turn ${turn + 1}` : "no turn";
}
