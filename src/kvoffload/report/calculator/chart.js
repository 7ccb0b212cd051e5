/*
 * TPOT against the context as an inline SVG, both axes logarithmic, with the budget line: the
 * drawing the calculator page and the chapter-03 widget share. It draws points it is given and
 * computes no model figure. Exposes window.KvoChart.
 */
(function () {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";
  const F = window.KvoFormat;

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // consecutive segments of a curve with the same fit, each run drawn as one path
  function runs(points) {
    const out = [];
    let current = null;
    for (let i = 1; i < points.length; i++) {
      const fits = points[i - 1].fits && points[i].fits;
      if (!current || current.fits !== fits) {
        current = { fits: fits, points: [points[i - 1]] };
        out.push(current);
      }
      current.points.push(points[i]);
    }
    return out;
  }

  // n contexts from lo to hi, evenly spaced on a log scale (whole tokens)
  function contexts(lo, hi, n) {
    const xs = [];
    for (let i = 0; i < n; i++) xs.push(Math.round(lo * Math.pow(hi / lo, i / (n - 1))));
    return xs;
  }

  // Draw into `box` and return the SVG. opts: lo, hi (the context axis, tokens); series, each
  // {name, cls, points: [{x, y (ms), fits}]}, dashed where it does not fit; budget (ms); markers
  // [{x, y, cls}]; labels (name each curve at its end; default true); minWidth, maxWidth (px).
  function draw(box, opts) {
    const { lo, hi, series, budget } = opts;
    const markers = opts.markers || [];
    const width = Math.max(opts.minWidth || 300, Math.min(opts.maxWidth || 720, box.clientWidth || 600));
    const height = Math.round(Math.min(340, Math.max(240, width * 0.55)));
    const pad = { left: 66, right: 12, top: 14, bottom: 40 };
    const ys = series.flatMap((sr) => sr.points.map((p) => p.y)).concat([budget], markers.map((m) => m.y));
    const yLo = Math.pow(10, Math.floor(Math.log10(Math.min(...ys))));
    let yHi = Math.pow(10, Math.ceil(Math.log10(Math.max(...ys))));
    if (yHi <= yLo) yHi = yLo * 10;
    const X = (x) => pad.left + ((Math.log(x) - Math.log(lo)) / (Math.log(hi) - Math.log(lo))) * (width - pad.left - pad.right);
    const Y = (y) => height - pad.bottom - ((Math.log(y) - Math.log(yLo)) / (Math.log(yHi) - Math.log(yLo))) * (height - pad.top - pad.bottom);
    const svg = el("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height, role: "img" });
    svg.appendChild(el("title", {}, "TPOT against the context, log scales"));
    const grid = el("g", { class: "kvo-grid" });
    for (let y = yLo; y <= yHi * 1.0001; y *= 10) {
      grid.appendChild(el("line", { x1: pad.left, x2: width - pad.right, y1: Y(y), y2: Y(y) }));
      grid.appendChild(el("text", { x: pad.left - 6, y: Y(y) + 4, "text-anchor": "end" }, F.nf(3).format(y)));
    }
    const factor = hi / lo >= 64 ? 4 : 2;
    for (let x = Math.pow(2, Math.ceil(Math.log2(lo))); x <= hi; x *= factor) {
      grid.appendChild(el("line", { x1: X(x), x2: X(x), y1: pad.top, y2: height - pad.bottom }));
      grid.appendChild(el("text", { x: X(x), y: height - pad.bottom + 16, "text-anchor": "middle" }, F.tokens(x)));
    }
    svg.appendChild(grid);
    svg.appendChild(el("text", { x: (pad.left + width - pad.right) / 2, y: height - 6, "text-anchor": "middle", class: "kvo-axis-title" }, "context (tokens, log scale)"));
    const mid = (pad.top + height - pad.bottom) / 2;
    svg.appendChild(el("text", { x: 12, y: mid, "text-anchor": "middle", class: "kvo-axis-title", transform: "rotate(-90 12 " + mid + ")" }, "TPOT (ms, log scale)"));
    const by = Y(budget);
    svg.appendChild(el("line", { x1: pad.left, x2: width - pad.right, y1: by, y2: by, class: "kvo-budget" }));
    svg.appendChild(el("text", { x: pad.left + 4, y: by - 5, "text-anchor": "start", class: "kvo-budget-label" }, F.nf(4).format(budget) + " ms budget"));
    for (const sr of series) {
      if (opts.labels !== false) {
        const last = sr.points[sr.points.length - 1];
        svg.appendChild(el("text", { x: X(last.x) - 4, y: Y(last.y) + (sr === series[0] ? -8 : 16), "text-anchor": "end", class: sr.cls + "-label" }, sr.name));
      }
      for (const run of runs(sr.points)) {
        const d = run.points.map((p, i) => (i ? "L" : "M") + X(p.x).toFixed(1) + " " + Y(p.y).toFixed(1)).join(" ");
        svg.appendChild(el("path", { d: d, class: sr.cls + (run.fits ? "" : " kvo-nofit"), fill: "none" }));
      }
    }
    for (const m of markers) svg.appendChild(el("circle", { cx: X(m.x), cy: Y(m.y), r: 5, class: m.cls || "kvo-marker" }));
    box.replaceChildren(svg);
    return svg;
  }

  window.KvoChart = { draw: draw, contexts: contexts, runs: runs };
})();
