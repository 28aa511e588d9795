// Beliefs and edges as a graph: a node per thing an edge or a belief is about, sized by the
// strength of the beliefs about it; an edge per causal edge, drawn thicker the surer it is (its
// confidence), dashed red when something contradicts it. Laid out on a circle: the same state
// always draws the same picture, so two seqs can be compared by eye.

import { h, svg } from "./dom.js";

const SIZE = 420;
const RADIUS = 150;

function key(text) {
  return String(text || "").trim().toLowerCase();
}

function radius(node) {
  return 5 + 13 * node.strength;
}

export function memoryGraph(state, { onBelief, onEdge } = {}) {
  const nodes = new Map();
  const node = (name) => {
    const id = key(name);
    if (!nodes.has(id)) nodes.set(id, { id, label: String(name).trim(), strength: 0, beliefs: [] });
    return nodes.get(id);
  };
  for (const edge of state.edges) {
    node(edge.src);
    node(edge.dst);
  }
  for (const belief of state.beliefs) {
    if (!belief.about) continue;
    const about = node(belief.about);
    about.beliefs.push(belief);
    about.strength = Math.max(about.strength, belief.strength ?? belief.confidence ?? 0);
  }
  const list = [...nodes.values()].sort((a, b) => a.id.localeCompare(b.id));
  if (!list.length) return h("p", { class: "muted" }, "No edges and no belief about a named thing yet.");
  const place = new Map();
  list.forEach((item, index) => {
    const angle = (2 * Math.PI * index) / list.length - Math.PI / 2;
    place.set(item.id, [SIZE / 2 + RADIUS * Math.cos(angle), SIZE / 2 + RADIUS * Math.sin(angle)]);
  });
  const picture = svg("svg", { viewBox: `0 0 ${SIZE} ${SIZE}`, class: "graph", role: "img",
    "aria-label": `${list.length} things, ${state.edges.length} edges` });
  picture.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }))));
  for (const edge of state.edges) {
    const [x1, y1] = place.get(key(edge.src));
    const [xd, yd] = place.get(key(edge.dst));
    const gap = radius(nodes.get(key(edge.dst))) + 3; // the arrow stops at the node's rim
    const length = Math.hypot(xd - x1, yd - y1) || 1;
    const [x2, y2] = [xd - ((xd - x1) * gap) / length, yd - ((yd - y1) * gap) / length];
    const contradicted = (edge.contradicted_by || []).length > 0;
    const line = svg("line", { x1, y1, x2, y2, class: `edge${contradicted ? " contradicted" : ""}`,
      "stroke-width": (1 + 4 * edge.confidence).toFixed(2), "stroke-opacity": (0.3 + 0.7 * edge.confidence).toFixed(2),
      "marker-end": "url(#arrow)", onclick: () => onEdge && onEdge(edge) },
    svg("title", {}, `${edge.src} —${edge.relation}→ ${edge.dst} (confidence ${edge.confidence.toFixed(2)})`));
    line.dataset.edge = `${edge.src}|${edge.relation}|${edge.dst}`;
    picture.append(line);
  }
  for (const item of list) {
    const [x, y] = place.get(item.id);
    const r = radius(item);
    const group = svg("g", { class: "node", onclick: () => item.beliefs[0] && onBelief && onBelief(item.beliefs[0]) },
      svg("circle", { cx: x, cy: y, r: r.toFixed(1), "fill-opacity": (0.35 + 0.65 * item.strength).toFixed(2) }),
      svg("text", { x, y: y - r - 4, "text-anchor": "middle" }, item.label.slice(0, 24)),
      svg("title", {}, `${item.label}: ${item.beliefs.length} beliefs, strongest ${item.strength.toFixed(2)}`));
    group.dataset.node = item.id;
    picture.append(group);
  }
  return picture;
}
