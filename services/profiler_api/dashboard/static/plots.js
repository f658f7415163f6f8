// Small SVG plots for the TPS dashboard: grouped bars and a heatmap, drawn by hand so that
// the page needs nothing from another origin. Each data mark is a <rect class="mark">
// with a <title> for its tooltip; the container's data-marks attribute counts them.
"use strict";

const TPSPlots = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#2563eb", "#16a34a", "#f59e0b", "#9333ea", "#dc2626", "#0891b2", "#64748b"];

  function el(name, attrs, parent, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function svgIn(container, width, height) {
    container.replaceChildren();
    // Drawn at its natural size (scaled down, never up, to fit its card).
    return el("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img" }, container);
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const step = 10 ** Math.floor(Math.log10(value));
    for (const m of [1, 2, 2.5, 4, 5, 8, 10]) if (m * step >= value) return m * step;
    return 10 * step;
  }

  function legend(svg, names, x, y) {
    let lx = x;
    names.forEach((name, i) => {
      el("rect", { x: lx, y: y - 9, width: 10, height: 10, fill: PALETTE[i % PALETTE.length] }, svg);
      el("text", { x: lx + 14, y, class: "legend" }, svg, name);
      lx += 14 + 7 * name.length + 18;
    });
  }

  // Grouped vertical bars: one group per category, one bar per series.
  // spec: {categories: [str], series: [{name, values: [number|null]}], yLabel, format, min,
  //        reference: number (a dashed line, e.g. 1.0 for speedups)}
  function bars(container, spec) {
    const { categories, series } = spec;
    const format = spec.format || ((v) => v.toFixed(2));
    const values = series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
    const width = Math.max(640, categories.length * (series.length * 16 + 28) + 90);
    const height = 320, left = 110, right = 16, top = 28, bottom = 100;
    const svg = svgIn(container, width, height);
    const lo = spec.min ?? Math.min(0, ...values);
    const hi = niceMax(Math.max(...values, spec.reference ?? 0));
    const y = (v) => top + (height - top - bottom) * (1 - (v - lo) / (hi - lo || 1));
    for (let i = 0; i <= 4; i++) {
      const v = lo + ((hi - lo) * i) / 4;
      el("line", { x1: left, x2: width - right, y1: y(v), y2: y(v), class: "grid" }, svg);
      el("text", { x: left - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, svg, format(v));
    }
    if (spec.yLabel) {
      el("text", { x: 56, y: top + (height - top - bottom) / 2, class: "axis",
        transform: `rotate(-90 56 ${top + (height - top - bottom) / 2})`,
        "text-anchor": "middle" }, svg, spec.yLabel);
    }
    if (spec.reference !== undefined) {
      el("line", { x1: left, x2: width - right, y1: y(spec.reference), y2: y(spec.reference),
        class: "reference" }, svg);
    }
    const band = (width - left - right) / Math.max(categories.length, 1);
    const barWidth = Math.min(28, (band - 10) / Math.max(series.length, 1));
    let marks = 0;
    categories.forEach((category, c) => {
      const x0 = left + c * band + (band - barWidth * series.length) / 2;
      series.forEach((s, i) => {
        const v = s.values[c];
        if (v === null || v === undefined) return;
        const base = y(Math.max(lo, Math.min(0, hi)));
        const top_ = Math.min(y(v), base), h = Math.max(Math.abs(base - y(v)), 1);
        const rect = el("rect", { x: x0 + i * barWidth, y: top_, width: barWidth - 2, height: h,
          fill: PALETTE[i % PALETTE.length], class: "mark" }, svg);
        el("title", {}, rect, `${category} · ${s.name}: ${format(v)}`);
        marks += 1;
      });
      const lx = left + c * band + band / 2, ly = height - bottom + 14;
      el("text", { x: lx, y: ly, class: "tick", "text-anchor": "end",
        transform: `rotate(-25 ${lx} ${ly})` }, svg, category);
    });
    legend(svg, series.map((s) => s.name), left, 14);
    container.dataset.marks = String(marks);
    return marks;
  }

  // A heatmap of rows x columns. cell(r, c) returns {fraction in [0, 1], text} or null.
  function heatmap(container, spec) {
    const { rows, cols, cell } = spec;
    const left = 190, top = 30, cw = Math.max(90, Math.min(160, 600 / Math.max(cols.length, 1)));
    const ch = 26, width = left + cols.length * cw + 10, height = top + rows.length * ch + 10;
    const svg = svgIn(container, width, height);
    cols.forEach((col, j) => {
      el("text", { x: left + j * cw + cw / 2, y: top - 10, class: "axis", "text-anchor": "middle" },
        svg, col);
    });
    let marks = 0;
    rows.forEach((row, i) => {
      el("text", { x: left - 8, y: top + i * ch + ch / 2 + 4, class: "tick", "text-anchor": "end" },
        svg, row);
      cols.forEach((col, j) => {
        const value = cell(i, j);
        const x = left + j * cw, y = top + i * ch;
        if (!value) {
          el("rect", { x, y, width: cw - 2, height: ch - 2, class: "empty-cell" }, svg);
          return;
        }
        const light = Math.round(92 - 55 * Math.max(0, Math.min(1, value.fraction)));
        const rect = el("rect", { x, y, width: cw - 2, height: ch - 2,
          fill: `hsl(217 80% ${light}%)`, class: "mark" }, svg);
        el("title", {}, rect, `${row} · ${col}: ${value.text}`);
        el("text", { x: x + cw / 2, y: y + ch / 2 + 4, "text-anchor": "middle",
          class: light < 60 ? "cell-text dark" : "cell-text" }, svg, value.text);
        marks += 1;
      });
    });
    container.dataset.marks = String(marks);
    return marks;
  }

  return { bars, heatmap, PALETTE };
})();
