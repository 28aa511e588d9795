// A word diff of two texts (longest common subsequence over words and the spaces between them),
// rendered with <del> and <ins>: what the narrative or portrait lost and gained.

import { h } from "./dom.js";

const LIMIT = 4_000_000; // cells of the LCS table; past it, the two texts are shown whole

function words(text) {
  return String(text ?? "").match(/\s+|[^\s]+/g) || [];
}

// [[op, text]] with op "=", "-" or "+", in reading order.
export function wordDiff(before, after) {
  const a = words(before);
  const b = words(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start += 1;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA -= 1; endB -= 1; }
  const middleA = a.slice(start, endA);
  const middleB = b.slice(start, endB);
  const parts = [];
  if (start) parts.push(["=", a.slice(0, start).join("")]);
  if (middleA.length * middleB.length > LIMIT) {
    if (middleA.length) parts.push(["-", middleA.join("")]);
    if (middleB.length) parts.push(["+", middleB.join("")]);
  } else {
    parts.push(...lcs(middleA, middleB));
  }
  if (endA < a.length) parts.push(["=", a.slice(endA).join("")]);
  return merge(parts);
}

function lcs(a, b) {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const table = new Uint32Array(rows * cols);
  for (let i = a.length - 1; i >= 0; i -= 1) {
    for (let j = b.length - 1; j >= 0; j -= 1) {
      table[i * cols + j] = a[i] === b[j] ? table[(i + 1) * cols + j + 1] + 1
        : Math.max(table[(i + 1) * cols + j], table[i * cols + j + 1]);
    }
  }
  const parts = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) { parts.push(["=", a[i]]); i += 1; j += 1; }
    else if (table[(i + 1) * cols + j] >= table[i * cols + j + 1]) { parts.push(["-", a[i]]); i += 1; }
    else { parts.push(["+", b[j]]); j += 1; }
  }
  while (i < a.length) parts.push(["-", a[i++]]);
  while (j < b.length) parts.push(["+", b[j++]]);
  return parts;
}

function merge(parts) {
  const merged = [];
  for (const [op, text] of parts) {
    const last = merged[merged.length - 1];
    if (last && last[0] === op) last[1] += text;
    else merged.push([op, text]);
  }
  return merged;
}

// One text with both sides marked (deletions struck through, insertions underlined).
export function renderDiff(before, after) {
  const box = h("div", { class: "diff" });
  for (const [op, text] of wordDiff(before, after)) {
    box.append(op === "=" ? text : h(op === "-" ? "del" : "ins", {}, text));
  }
  return box;
}

// One side of a diff: the left shows what it loses (<del>), the right what it gains (<ins>).
export function renderSide(before, after, side) {
  const box = h("div", { class: "diff" });
  for (const [op, text] of wordDiff(before, after)) {
    if (op === "=") box.append(text);
    else if (op === "-" && side === "left") box.append(h("del", {}, text));
    else if (op === "+" && side === "right") box.append(h("ins", {}, text));
  }
  return box;
}

export function changed(before, after) {
  return String(before ?? "") !== String(after ?? "");
}
