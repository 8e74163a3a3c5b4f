// wfkit GraphSurface: the browser side of wfkit.widgets.surface.GraphSurface.
//
// An anywidget ES module shipped inside the Python package: no npm build, no CDN.
// Python renders the picture with Graphviz and sends it as the `svg` trait, with `edge_map`
// (SVG element id of each edge -> [source, outlet, target]). This module only decorates that
// SVG; it never lays anything out, so status and selection updates never move a node.
// Zoom sets the <svg>'s width and height (its viewBox scales the drawing), so SVG coordinates
// from getScreenCTM stay exact at every zoom and scroll position.
//
// DOM contract (browser tests rely on it; keep it stable):
//   div.wfkit-surface.wfkit-graph        the widget's root element (tabindex=0), with
//       data-ready="true"                once the first picture is drawn
//       data-render-count="<n>"          pictures drawn so far (+1 per new `svg`; status,
//                                        selection and tooltip changes never add one)
//       data-selected="<node id>"        mirror of the `selected` trait ("" when none)
//       data-selected-edge="<json>"      mirror of `selected_edge` ("[]" when none)
//       data-zoom="<factor>"             the zoom (1 = the picture's natural size)
//       data-fit="true|false"            true while the zoom follows the width (the default)
//     div.wfkit-surface-toolbar
//       button.wfkit-zoom-fit, button.wfkit-zoom-out, button.wfkit-zoom-in,
//       button.wfkit-zoom-reset ("100 %"), span.wfkit-zoom-level ("63 %")
//       div.wfkit-surface-palette        one span.wfkit-palette-chip[data-kind="<kind>"] per
//                                        entry of `palette` (absent when it is empty)
//     div.wfkit-surface-stage            scrolls; holds the <svg> Graphviz produced
//       g.node#node-<id>[data-node-id="<id>"]           one per graph node
//           class also holds its `status` value, `wfkit-selected` when selected,
//           and data-status="<status>" while it has one
//       g.node#compensation-<id>[data-compensation-of="<id>"]  a compensation box
//       g.edge#edge-<u>-<outlet>-<v>[data-source][data-outlet][data-target]
//           holds path.wfkit-hit, a wide transparent copy of the edge line to click
//       g.wfkit-outlet[data-source="<id>"][data-outlet="<name>"]  the selected node's outlets
//       line.wfkit-rubber-band           the line drawn while dragging a connection
//     div.wfkit-palette-ghost            follows the pointer while a chip is dragged
// Interactions:
//   click a node (or its compensation box) -> selected = id, selected_edge = []
//   click an edge                          -> selected_edge = [u, outlet, v], selected = ""
//   click the background                   -> both cleared
//   press on a node, move >= 4px, release on another node (Playwright: mouse down/move/up)
//                                          -> model.send({type: "connect", source, target})
//   the same from a g.wfkit-outlet handle  -> model.send({type: "connect", source, target,
//                                             outlet})
//   drag a palette chip onto the background -> model.send({type: "drop", kind})
//   ... onto a node                        -> model.send({type: "drop", kind, after: id})
//   click a palette chip                   -> model.send({type: "drop", kind})
//   Delete/Backspace, Ctrl/Cmd+Z, Ctrl/Cmd+Shift+Z or Ctrl+Y while the root has focus
//                                          -> model.send({type: "key", action:
//                                             "delete" | "undo" | "redo"})
//   drag on the background pans; Ctrl/Cmd+wheel zooms around the pointer; the toolbar
//   fits, zooms out/in by 1.25 and shows the natural size
//   (the kernel answers a click by changing traits, so assert on kernel-side state too)

const SVG_NS = "http://www.w3.org/2000/svg";
const XLINK_NS = "http://www.w3.org/1999/xlink";
const DRAG_THRESHOLD = 4;
const SELECTED = "wfkit-selected";
const PX_PER_PT = 96 / 72;
const ZOOM_MIN = 0.1;
const ZOOM_MAX = 4;
const ZOOM_STEP = 1.25;
const OUTLET_MARGIN = 24; // SVG units added under the picture: a bottom node's handles fit
const FALLBACK_STYLE = "wfkitFallbackFor";

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

function button(cls, text, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = `wfkit-surface-button ${cls}`;
  b.textContent = text;
  b.title = title;
  return b;
}

// A static picture saved next to the view (data-wfkit-fallback="<key>") stands in for it when
// no kernel is there; while this view is live, a style sheet hides it.
function hideFallback(key) {
  if (!key) return () => {};
  let style = [...document.head.querySelectorAll("style")].find(
    (s) => s.dataset[FALLBACK_STYLE] === key,
  );
  if (!style) {
    style = document.createElement("style");
    style.dataset[FALLBACK_STYLE] = key;
    style.dataset.views = "0";
    const marker = `[data-wfkit-fallback="${CSS.escape(key)}"]`;
    style.textContent =
      `${marker} { display: none !important; }\n` +
      `.jp-OutputArea-child:has(${marker}) { display: none !important; }`;
    document.head.appendChild(style);
  }
  style.dataset.views = String(Number(style.dataset.views) + 1);
  return () => {
    const left = Number(style.dataset.views) - 1;
    style.dataset.views = String(left);
    if (left <= 0) style.remove();
  };
}

function render({ model, el }) {
  el.classList.add("wfkit-surface", "wfkit-graph");
  el.tabIndex = 0;
  el.dataset.lmSuppressShortcuts = "true"; // JupyterLab: our keys are not notebook commands
  const toolbar = document.createElement("div");
  toolbar.className = "wfkit-surface-toolbar";
  const fitButton = button("wfkit-zoom-fit", "fit", "Fit the whole graph to the width");
  const outButton = button("wfkit-zoom-out", "\u2212", "Zoom out (Ctrl+wheel)");
  const inButton = button("wfkit-zoom-in", "+", "Zoom in (Ctrl+wheel)");
  const resetButton = button("wfkit-zoom-reset", "100 %", "Natural size");
  const level = document.createElement("span");
  level.className = "wfkit-zoom-level";
  const palette = document.createElement("div");
  palette.className = "wfkit-surface-palette";
  toolbar.append(fitButton, outButton, inButton, resetButton, level, palette);
  const stage = document.createElement("div");
  stage.className = "wfkit-surface-stage";
  el.append(toolbar, stage);
  let renders = 0;
  let press = null; // what the pointer is doing: connect, pan or chip
  let suppressClick = false;
  let zoom = 1;
  let fitting = true;
  let natural = null; // {width, height} in px at zoom 1
  let handlesKey = "";
  let margined = false; // the picture has room for outlet handles under it

  function hasOutlets() {
    return Object.keys(model.get("outlets") || {}).length > 0;
  }

  // room for outlet handles under the picture, only while there are outlets to show
  function setMargin(svg, wanted) {
    const box = svg.viewBox && svg.viewBox.baseVal;
    if (wanted === margined || !box || !(box.height > 0)) return;
    box.height += wanted ? OUTLET_MARGIN : -OUTLET_MARGIN;
    margined = wanted;
    natural = measure(svg);
  }

  function outletsChanged() {
    const svg = svgElement();
    if (svg && hasOutlets() !== margined) {
      setMargin(svg, hasOutlets());
      if (fitting) fit();
      else applyZoom(zoom);
    }
    decorate();
  }

  // --- zoom -------------------------------------------------------------------------------

  function svgElement() {
    return stage.querySelector("svg");
  }

  function measure(svg) {
    const box = svg.viewBox && svg.viewBox.baseVal;
    if (box && box.width > 0 && box.height > 0) {
      return { width: box.width * PX_PER_PT, height: box.height * PX_PER_PT };
    }
    const width = parseFloat(svg.getAttribute("width")) || 300;
    const height = parseFloat(svg.getAttribute("height")) || 150;
    return { width: width * PX_PER_PT, height: height * PX_PER_PT };
  }

  function applyZoom(factor, anchor) {
    const svg = svgElement();
    if (!Number.isFinite(factor)) return;
    const next = Math.min(ZOOM_MAX, Math.max(ZOOM_MIN, factor));
    if (svg && natural) {
      const rect = stage.getBoundingClientRect();
      const ax = anchor ? anchor.x - rect.left : stage.clientWidth / 2;
      const ay = anchor ? anchor.y - rect.top : stage.clientHeight / 2;
      const cx = stage.scrollLeft + ax;
      const cy = stage.scrollTop + ay;
      const ratio = next / zoom;
      svg.setAttribute("width", String(natural.width * next));
      svg.setAttribute("height", String(natural.height * next));
      stage.scrollLeft = cx * ratio - ax;
      stage.scrollTop = cy * ratio - ay;
    }
    zoom = next;
    el.dataset.zoom = String(Math.round(zoom * 1000) / 1000);
    el.dataset.fit = String(fitting);
    level.textContent = `${Math.round(zoom * 100)} %`;
    drawHandles(true);
  }

  function fit() {
    fitting = true;
    const style = getComputedStyle(stage);
    // (an element not in the document yet has no computed padding: "" parses as NaN)
    const padding = (parseFloat(style.paddingLeft) || 0) + (parseFloat(style.paddingRight) || 0);
    const available = stage.clientWidth - padding - 1;
    if (!natural || !(available > 0)) {
      el.dataset.fit = "true";
      return; // not on screen yet: the resize observer fits once it is
    }
    applyZoom(Math.min(1, available / natural.width));
  }

  function zoomBy(factor, anchor) {
    fitting = false;
    applyZoom(zoom * factor, anchor);
  }

  fitButton.addEventListener("click", fit);
  outButton.addEventListener("click", () => zoomBy(1 / ZOOM_STEP));
  inButton.addEventListener("click", () => zoomBy(ZOOM_STEP));
  resetButton.addEventListener("click", () => {
    fitting = false;
    applyZoom(1);
  });

  function onWheel(ev) {
    if (!ev.ctrlKey && !ev.metaKey) return; // a plain wheel scrolls the page
    ev.preventDefault();
    zoomBy(Math.exp(-ev.deltaY * 0.002), { x: ev.clientX, y: ev.clientY });
  }

  // refit when the widget's width changes (never on its height: fitting changes that)
  let observedWidth = -1;
  const resized = new ResizeObserver((entries) => {
    const width = Math.round(entries[entries.length - 1].contentRect.width);
    if (width === observedWidth) return;
    observedWidth = width;
    if (fitting) fit();
  });
  resized.observe(el);

  // --- decoration -------------------------------------------------------------------------

  function drawPalette() {
    const kinds = model.get("palette") || [];
    palette.replaceChildren(
      ...kinds.map((kind) => {
        const chip = document.createElement("span");
        chip.className = "wfkit-palette-chip";
        chip.dataset.kind = kind;
        chip.textContent = kind;
        chip.title = `Drag onto the graph to add a ${kind} node (onto a node: after it)`;
        return chip;
      }),
    );
    palette.hidden = kinds.length === 0;
  }

  function drawHandles(force) {
    const selected = model.get("selected") || "";
    const outlets = (model.get("outlets") || {})[selected] || [];
    const key = `${renders}|${selected}|${JSON.stringify(outlets)}`;
    if (!force && key === handlesKey) return;
    handlesKey = key;
    for (const old of stage.querySelectorAll("g.wfkit-outlets")) old.remove();
    const node = selected ? nodeElement(stage, selected) : null;
    const graph = stage.querySelector("svg g.graph");
    if (!node || !graph || outlets.length === 0) return;
    const box = node.getBBox();
    const group = document.createElementNS(SVG_NS, "g");
    group.setAttribute("class", "wfkit-outlets");
    // a row under the node, drawn at a constant size on screen whatever the zoom
    const unit = 1 / (zoom * PX_PER_PT); // SVG units per screen pixel
    const font = 10 * unit;
    const height = 15 * unit;
    let x = box.x;
    const y = box.y + box.height + 3 * unit;
    for (const name of outlets) {
      const handle = document.createElementNS(SVG_NS, "g");
      handle.setAttribute("class", "wfkit-outlet");
      handle.dataset.source = selected;
      handle.dataset.outlet = name;
      const width = (12 + name.length * 6.2) * unit;
      const rect = document.createElementNS(SVG_NS, "rect");
      rect.setAttribute("x", String(x));
      rect.setAttribute("y", String(y));
      rect.setAttribute("width", String(width));
      rect.setAttribute("height", String(height));
      rect.setAttribute("rx", String(height / 2));
      const text = document.createElementNS(SVG_NS, "text");
      text.setAttribute("x", String(x + 6 * unit));
      text.setAttribute("y", String(y + height - 4 * unit));
      text.setAttribute("font-size", String(font));
      text.textContent = name;
      const tip = document.createElementNS(SVG_NS, "title");
      tip.textContent = `drag '${name}' onto a node to connect it`;
      handle.append(tip, rect, text);
      group.appendChild(handle);
      x += width + 3 * unit;
    }
    graph.appendChild(group);
  }

  function decorate() {
    const status = model.get("status") || {};
    const tooltips = model.get("tooltips") || {};
    const selected = model.get("selected") || "";
    const edge = model.get("selected_edge") || [];
    const dragging = press && press.dragging && press.mode === "connect";
    for (const g of stage.querySelectorAll("g.node")) {
      const id = g.dataset.nodeId;
      const state = id !== undefined ? status[id] || "" : "";
      const classes = [g.dataset.baseClass, state];
      if (id !== undefined && id === selected) classes.push(SELECTED);
      if (dragging && id === press.source) classes.push("wfkit-drag-source");
      if (press && press.dragging && id !== undefined && id === press.over)
        classes.push("wfkit-drag-target");
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
    drawHandles(false);
  }

  function draw() {
    stage.innerHTML = model.get("svg") || "";
    const svg = svgElement();
    natural = null;
    margined = false;
    if (svg) {
      natural = measure(svg);
      setMargin(svg, hasOutlets());
      svg.removeAttribute("style");
    }
    annotate(stage, model.get("edge_map") || {});
    renders += 1;
    el.dataset.renderCount = String(renders);
    if (fitting) fit();
    else applyZoom(zoom);
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

  // --- pointer gestures -------------------------------------------------------------------

  function svgPoint(ev) {
    const graph = stage.querySelector("svg g.graph") || svgElement();
    const svg = svgElement();
    if (!graph || !svg || !graph.getScreenCTM) return null;
    const point = svg.createSVGPoint();
    point.x = ev.clientX;
    point.y = ev.clientY;
    return { graph, at: point.matrixTransform(graph.getScreenCTM().inverse()) };
  }

  function bandStart() {
    if (press.handle) {
      const box = press.handle.getBBox();
      return { x: box.x + box.width, y: box.y + box.height / 2 };
    }
    const source = nodeElement(stage, press.source);
    if (!source) return null;
    const box = source.getBBox();
    return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
  }

  function drawBand(ev) {
    const found = svgPoint(ev);
    if (!found) return;
    if (!press.band) {
      const start = bandStart();
      if (!start) return;
      press.band = document.createElementNS(SVG_NS, "line");
      press.band.setAttribute("class", "wfkit-rubber-band");
      press.band.setAttribute("x1", String(start.x));
      press.band.setAttribute("y1", String(start.y));
      found.graph.appendChild(press.band);
    }
    press.band.setAttribute("x2", String(found.at.x));
    press.band.setAttribute("y2", String(found.at.y));
  }

  function moveGhost(ev) {
    if (!press.ghost) {
      press.ghost = document.createElement("div");
      press.ghost.className = "wfkit-palette-ghost";
      press.ghost.textContent = press.kind;
      el.appendChild(press.ghost);
    }
    press.ghost.style.left = `${ev.clientX + 8}px`;
    press.ghost.style.top = `${ev.clientY + 8}px`;
  }

  function endPress() {
    if (press && press.band) press.band.remove();
    if (press && press.ghost) press.ghost.remove();
    const wasDragging = press && press.dragging;
    press = null;
    el.classList.remove("wfkit-dragging", "wfkit-panning");
    if (wasDragging) decorate();
  }

  function onPointerDown(ev) {
    if (ev.button !== 0) return;
    el.focus({ preventScroll: true });
    const base = { x: ev.clientX, y: ev.clientY, dragging: false, band: null, over: null };
    const chip = ev.target.closest ? ev.target.closest(".wfkit-palette-chip") : null;
    if (chip) {
      press = { ...base, mode: "chip", kind: chip.dataset.kind, ghost: null };
      ev.preventDefault();
      return;
    }
    if (!stage.contains(ev.target)) return;
    const handle = ev.target.closest ? ev.target.closest("g.wfkit-outlet") : null;
    if (handle) {
      press = { ...base, mode: "connect", source: handle.dataset.source, handle };
      press.outlet = handle.dataset.outlet;
      ev.preventDefault();
      return;
    }
    const source = nodeIdOf(ev.target);
    if (source !== null) {
      press = { ...base, mode: "connect", source, handle: null, outlet: null };
      ev.preventDefault(); // no text selection while dragging
      return;
    }
    const onEdge = ev.target.closest && ev.target.closest("g.edge[data-source]");
    if (!onEdge) {
      press = { ...base, mode: "pan", left: stage.scrollLeft, top: stage.scrollTop };
      ev.preventDefault();
    }
  }

  function onPointerMove(ev) {
    if (!press) return;
    const far = Math.hypot(ev.clientX - press.x, ev.clientY - press.y) >= DRAG_THRESHOLD;
    if (!press.dragging && !far) return;
    press.dragging = true;
    if (press.mode === "pan") {
      el.classList.add("wfkit-panning");
      stage.scrollLeft = press.left - (ev.clientX - press.x);
      stage.scrollTop = press.top - (ev.clientY - press.y);
      return;
    }
    el.classList.add("wfkit-dragging");
    const under = document.elementFromPoint(ev.clientX, ev.clientY);
    press.over = under && stage.contains(under) ? nodeIdOf(under) : null;
    if (press.mode === "chip") moveGhost(ev);
    else drawBand(ev);
    decorate();
  }

  function swallowClick() {
    suppressClick = true;
    setTimeout(() => {
      suppressClick = false;
    }, 0);
  }

  function onPointerUp(ev) {
    if (!press) return;
    const under = document.elementFromPoint(ev.clientX, ev.clientY);
    const onStage = under !== null && stage.contains(under);
    const target = onStage ? nodeIdOf(under) : null;
    if (press.mode === "chip") {
      if (!press.dragging || onStage) {
        const message = { type: "drop", kind: press.kind };
        if (press.dragging && target !== null) message.after = target;
        model.send(message);
      }
    } else if (press.dragging) {
      swallowClick();
      if (press.mode === "connect" && target !== null && target !== press.source) {
        const message = { type: "connect", source: press.source, target };
        if (press.outlet) message.outlet = press.outlet;
        model.send(message);
      }
    } else if (press.mode === "connect" && press.outlet) {
      swallowClick(); // a click on a handle keeps the selection
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

  function onKeyDown(ev) {
    if (ev.target !== el && !stage.contains(ev.target)) return; // a toolbar button's own keys
    const key = ev.key.toLowerCase();
    const mod = ev.ctrlKey || ev.metaKey;
    let action = null;
    if ((ev.key === "Delete" || ev.key === "Backspace") && !mod) action = "delete";
    else if (mod && key === "z") action = ev.shiftKey ? "redo" : "undo";
    else if (ev.ctrlKey && key === "y") action = "redo";
    if (action === null) return;
    ev.preventDefault();
    ev.stopPropagation();
    model.send({ type: "key", action });
  }

  el.addEventListener("pointerdown", onPointerDown);
  window.addEventListener("pointermove", onPointerMove);
  window.addEventListener("pointerup", onPointerUp);
  stage.addEventListener("click", onClick);
  stage.addEventListener("wheel", onWheel, { passive: false });
  el.addEventListener("keydown", onKeyDown);
  const unhide = hideFallback(model.get("fallback_key") || "");
  const handlers = {
    "change:svg": scheduleDraw,
    "change:edge_map": scheduleDraw,
    "change:status": decorate,
    "change:tooltips": decorate,
    "change:selected": decorate,
    "change:selected_edge": decorate,
    "change:outlets": outletsChanged,
    "change:palette": drawPalette,
  };
  for (const [event, handler] of Object.entries(handlers)) model.on(event, handler);
  drawPalette();
  draw();

  return () => {
    window.removeEventListener("pointermove", onPointerMove);
    window.removeEventListener("pointerup", onPointerUp);
    resized.disconnect();
    unhide();
    for (const [event, handler] of Object.entries(handlers)) model.off(event, handler);
  };
}

export default { render };
