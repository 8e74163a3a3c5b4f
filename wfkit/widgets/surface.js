// wfkit GraphSurface: the browser side of wfkit.widgets.surface.GraphSurface.
//
// An anywidget ES module shipped inside the Python package: no npm build, no CDN.
// Python renders the picture with Graphviz and sends it as the `svg` trait, with `edge_map`
// (SVG element id of each edge -> [source, outlet, target]). This module only decorates that
// SVG; it never lays anything out, so status and selection updates never move a node.
//
// DOM contract (browser tests rely on it; keep it stable):
//   div.wfkit-surface                    the widget's root element, with
//       data-ready="true"                once the first picture is drawn
//       data-render-count="<n>"          pictures drawn so far (+1 per new `svg`; status,
//                                        selection and tooltip changes never add one)
//       data-selected="<node id>"        mirror of the `selected` trait ("" when none)
//       data-selected-edge="<json>"      mirror of `selected_edge` ("[]" when none)
//     div.wfkit-surface-stage            holds the <svg> Graphviz produced
//       g.node#node-<id>[data-node-id="<id>"]           one per graph node
//           class also holds its `status` value, `wfkit-selected` when selected,
//           and data-status="<status>" while it has one
//       g.node#compensation-<id>[data-compensation-of="<id>"]  a compensation box
//       g.edge#edge-<u>-<outlet>-<v>[data-source][data-outlet][data-target]
//           holds path.wfkit-hit, a wide transparent copy of the edge line to click
//       line.wfkit-rubber-band           the line drawn while dragging from a node
// Interactions:
//   click a node (or its compensation box) -> selected = id, selected_edge = []
//   click an edge                          -> selected_edge = [u, outlet, v], selected = ""
//   click the background                   -> both cleared
//   press on a node, move >= 4px, release on another node (Playwright: locator.drag_to)
//                                          -> model.send({type: "connect", source, target})
//   (the kernel answers a click by changing traits, so assert on kernel-side state too)

const SVG_NS = "http://www.w3.org/2000/svg";
const XLINK_NS = "http://www.w3.org/1999/xlink";
const DRAG_THRESHOLD = 4;
const SELECTED = "wfkit-selected";

function nodeIdOf(element) {
  const g = element && element.closest ? element.closest("g.node") : null;
  if (!g) return null;
  return g.dataset.nodeId ?? g.dataset.compensationOf ?? null;
}

function nodeElement(stage, id) {
  for (const g of stage.querySelectorAll("g.node[data-node-id]")) {
    if (g.dataset.nodeId === id) return g;
  }
  return null;
}

function annotate(stage, edgeMap) {
  for (const g of stage.querySelectorAll("g.node")) {
    const id = g.getAttribute("id") || "";
    if (id.startsWith("node-")) g.dataset.nodeId = id.slice("node-".length);
    else if (id.startsWith("compensation-"))
      g.dataset.compensationOf = id.slice("compensation-".length);
    g.dataset.baseClass = g.getAttribute("class") || "node";
    const link = g.querySelector("a");
    if (link) g.dataset.baseTooltip = link.getAttributeNS(XLINK_NS, "title") || "";
  }
  for (const g of stage.querySelectorAll("g.edge")) {
    g.dataset.baseClass = g.getAttribute("class") || "edge";
    const ends = edgeMap[g.getAttribute("id") || ""];
    if (!ends) continue; // compensation links are drawn, not edited
    [g.dataset.source, g.dataset.outlet, g.dataset.target] = ends;
    const line = g.querySelector("path");
    if (line) {
      const hit = document.createElementNS(SVG_NS, "path");
      hit.setAttribute("d", line.getAttribute("d") || "");
      hit.setAttribute("class", "wfkit-hit");
      hit.setAttribute("fill", "none");
      hit.setAttribute("stroke", "transparent");
      hit.setAttribute("stroke-width", "12");
      line.parentNode.appendChild(hit);
    }
  }
}

function sameEdge(g, edge) {
  return (
    edge.length === 3 &&
    g.dataset.source === edge[0] &&
    g.dataset.outlet === edge[1] &&
    g.dataset.target === edge[2]
  );
}

function render({ model, el }) {
  el.classList.add("wfkit-surface");
  const stage = document.createElement("div");
  stage.className = "wfkit-surface-stage";
  el.appendChild(stage);
  let renders = 0;
  let press = null; // {source, x, y, dragging, band}
  let suppressClick = false;

  function decorate() {
    const status = model.get("status") || {};
    const tooltips = model.get("tooltips") || {};
    const selected = model.get("selected") || "";
    const edge = model.get("selected_edge") || [];
    for (const g of stage.querySelectorAll("g.node")) {
      const id = g.dataset.nodeId;
      const state = id !== undefined ? status[id] || "" : "";
      const classes = [g.dataset.baseClass, state];
      if (id !== undefined && id === selected) classes.push(SELECTED);
      if (press && press.dragging && id === press.source) classes.push("wfkit-drag-source");
      if (press && press.dragging && id === press.over) classes.push("wfkit-drag-target");
      g.setAttribute("class", classes.filter(Boolean).join(" "));
      if (state) g.dataset.status = state;
      else delete g.dataset.status;
      const link = g.querySelector("a");
      if (link && id !== undefined) {
        const text = tooltips[id] ?? g.dataset.baseTooltip ?? "";
        link.setAttributeNS(XLINK_NS, "xlink:title", text);
      }
    }
    for (const g of stage.querySelectorAll("g.edge")) {
      const classes = [g.dataset.baseClass];
      if (g.dataset.source !== undefined && sameEdge(g, edge)) classes.push(SELECTED);
      g.setAttribute("class", classes.join(" "));
    }
    el.dataset.selected = selected;
    el.dataset.selectedEdge = JSON.stringify(edge);
  }

  function draw() {
    stage.innerHTML = model.get("svg") || "";
    annotate(stage, model.get("edge_map") || {});
    renders += 1;
    el.dataset.renderCount = String(renders);
    el.dataset.ready = "true";
    decorate();
  }

  // `svg` and `edge_map` arrive together; draw once for both
  let drawPending = false;
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    queueMicrotask(() => {
      drawPending = false;
      draw();
    });
  }

  function select(node, edge) {
    model.set("selected", node);
    model.set("selected_edge", edge);
    model.save_changes();
    decorate();
  }

  function svgPoint(ev) {
    const graph = stage.querySelector("svg g.graph") || stage.querySelector("svg");
    const svg = stage.querySelector("svg");
    if (!graph || !svg || !graph.getScreenCTM) return null;
    const point = svg.createSVGPoint();
    point.x = ev.clientX;
    point.y = ev.clientY;
    return { graph, at: point.matrixTransform(graph.getScreenCTM().inverse()) };
  }

  function drawBand(ev) {
    const found = svgPoint(ev);
    const source = nodeElement(stage, press.source);
    if (!found || !source) return;
    if (!press.band) {
      press.band = document.createElementNS(SVG_NS, "line");
      press.band.setAttribute("class", "wfkit-rubber-band");
      const box = source.getBBox();
      press.band.setAttribute("x1", String(box.x + box.width / 2));
      press.band.setAttribute("y1", String(box.y + box.height / 2));
      found.graph.appendChild(press.band);
    }
    press.band.setAttribute("x2", String(found.at.x));
    press.band.setAttribute("y2", String(found.at.y));
  }

  function endPress() {
    if (press && press.band) press.band.remove();
    const wasDragging = press && press.dragging;
    press = null;
    el.classList.remove("wfkit-dragging");
    if (wasDragging) decorate();
  }

  function onPointerDown(ev) {
    if (ev.button !== 0) return;
    const source = nodeIdOf(ev.target);
    press = { source, x: ev.clientX, y: ev.clientY, dragging: false, band: null, over: null };
    if (source !== null) ev.preventDefault(); // no text selection while dragging
  }

  function onPointerMove(ev) {
    if (!press || press.source === null) return;
    const far = Math.hypot(ev.clientX - press.x, ev.clientY - press.y) >= DRAG_THRESHOLD;
    if (!press.dragging && !far) return;
    press.dragging = true;
    el.classList.add("wfkit-dragging");
    press.over = nodeIdOf(ev.target);
    drawBand(ev);
    decorate();
  }

  function onPointerUp(ev) {
    if (!press) return;
    if (press.dragging) {
      const target = nodeIdOf(ev.target);
      suppressClick = true;
      setTimeout(() => {
        suppressClick = false;
      }, 0);
      if (press.source !== null && target !== null && target !== press.source) {
        model.send({ type: "connect", source: press.source, target });
      }
    }
    endPress();
  }

  function onClick(ev) {
    if (suppressClick) {
      suppressClick = false;
      return;
    }
    const node = nodeIdOf(ev.target);
    if (node !== null) return select(node, []);
    const edge = ev.target.closest ? ev.target.closest("g.edge[data-source]") : null;
    if (edge) return select("", [edge.dataset.source, edge.dataset.outlet, edge.dataset.target]);
    select("", []);
  }

  stage.addEventListener("pointerdown", onPointerDown);
  stage.addEventListener("pointermove", onPointerMove);
  window.addEventListener("pointerup", onPointerUp);
  stage.addEventListener("click", onClick);
  model.on("change:svg", scheduleDraw);
  model.on("change:edge_map", scheduleDraw);
  model.on("change:status", decorate);
  model.on("change:tooltips", decorate);
  model.on("change:selected", decorate);
  model.on("change:selected_edge", decorate);
  draw();

  return () => {
    window.removeEventListener("pointerup", onPointerUp);
    model.off("change:svg", scheduleDraw);
    model.off("change:edge_map", scheduleDraw);
    model.off("change:status", decorate);
    model.off("change:tooltips", decorate);
    model.off("change:selected", decorate);
    model.off("change:selected_edge", decorate);
  };
}

export default { render };
