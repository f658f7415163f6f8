// The TPS dashboard: asks for a token once per tab (kept in sessionStorage, sent as a bearer
// header), reads the service's JSON endpoints and draws each plot with TPSPlots.
"use strict";

const TOKEN_KEY = "tps.dashboard.token";
const SOURCES = [
  ["policy", "served ranking"],
  ["model", "model alone"],
  ["baseline_nearest", "nearest known GPU"],
  ["baseline_random", "random order"],
];

class Unauthorized extends Error {}

async function getJSON(path) {
  const response = await fetch(path, {
    headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}` },
  });
  if (response.status === 401 || response.status === 403) {
    const body = await response.json().catch(() => ({}));
    throw new Unauthorized(body.detail || `${response.status} from ${path}`);
  }
  if (!response.ok) throw new Error(`${path} answered ${response.status}`);
  return response.json();
}

function hardwareLabeller(labels) {
  // Devices that share a product name (an SM-limited configuration) are told apart by units.
  const names = new Map();
  for (const hw of labels) names.set(hw.name, (names.get(hw.name) || new Set()).add(hw.fingerprint));
  // The vendor's name adds nothing on an axis: the product names tell the vendors apart.
  return (hw) => {
    const name = hw.name.replace(/^(NVIDIA|AMD)\s+/, "");
    return names.get(hw.name).size > 1 && hw.compute_units ? `${name} (${hw.compute_units} units)` : name;
  };
}

function message(plot, text, cls = "message") {
  plot.replaceChildren();
  const p = document.createElement("p");
  p.className = cls;
  p.textContent = text;
  plot.appendChild(p);
}

function plotOf(name) {
  return document.querySelector(`[data-plot="${name}"]`);
}

function drawn(plot, marks) {
  plot.dataset.state = marks > 0 ? "rendered" : "empty";
}

const fmt = {
  int: (v) => Math.round(v).toLocaleString("en-US"),
  x: (v) => `${v.toFixed(2)}x`,
  ms: (v) => (v >= 1000 ? `${(v / 1000).toFixed(1)} s` : `${v.toFixed(v >= 10 ? 0 : 1)} ms`),
  score: (v) => v.toFixed(2),
  rate: (v) => (v >= 10 ? v.toFixed(0) : v.toFixed(2)),
};

function drawCoverage(coverage) {
  const plot = plotOf("coverage");
  if (!coverage.cells.length) return message(plot, "No probe runs yet."), drawn(plot, 0);
  const label = hardwareLabeller(coverage.cells.map((c) => c.hardware));
  const rows = [...new Map(coverage.cells.map((c) => [c.hardware.fingerprint, c.hardware])).values()];
  const ops = Object.keys(coverage.problems_per_op).sort();
  const byKey = new Map(coverage.cells.map((c) => [`${c.hardware.fingerprint}|${c.op}`, c]));
  drawn(plot, TPSPlots.heatmap(plot, {
    rows: rows.map(label),
    cols: ops.map((op) => `${op} (${coverage.problems_per_op[op]})`),
    cell: (i, j) => {
      const c = byKey.get(`${rows[i].fingerprint}|${ops[j]}`);
      if (!c) return null;
      const total = coverage.problems_per_op[ops[j]];
      return { fraction: c.problems / total, text: `${c.problems}/${total} · ${c.runs} runs` };
    },
  }));
}

function drawSpeedups(rows) {
  const plot = plotOf("speedups");
  if (!rows.length) {
    message(plot, "No problem has both vendor-default and another candidate measured yet.");
    return drawn(plot, 0);
  }
  const label = hardwareLabeller(rows.map((r) => r.hardware));
  const devices = [...new Map(rows.map((r) => [r.hardware.fingerprint, r.hardware])).values()];
  const ops = [...new Set(rows.map((r) => r.op))].sort();
  const at = new Map(rows.map((r) => [`${r.hardware.fingerprint}|${r.op}`, r]));
  drawn(plot, TPSPlots.bars(plot, {
    categories: devices.map(label),
    series: ops.map((op) => ({
      name: op,
      values: devices.map((d) => at.get(`${d.fingerprint}|${op}`)?.geomean_speedup ?? null),
    })),
    yLabel: "speedup over vendor-default",
    format: fmt.x,
    min: 0,
    reference: 1,
  }));
}

function drawPriors(rows) {
  const plot = plotOf("priors");
  const table = document.getElementById("priors-table");
  table.replaceChildren();
  if (!rows.length) {
    message(plot, "No run has been steered by priors yet.");
    return { saved: null, marks: drawn(plot, 0) };
  }
  const label = hardwareLabeller(rows.map((r) => r.hardware));
  const names = rows.map((r) => `${label(r.hardware)} · ${r.op}`);
  drawn(plot, TPSPlots.bars(plot, {
    categories: names,
    series: [
      { name: "full probe", values: rows.map((r) => r.full_mean_ms) },
      { name: "steered by priors", values: rows.map((r) => r.steered_mean_ms) },
    ],
    yLabel: "mean probe budget (ms)",
    format: fmt.ms,
    min: 0,
  }));
  const head = table.insertRow();
  for (const h of ["device · op", "steered runs", "full runs", "saved", "won by first prior"]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  let saved = 0;
  rows.forEach((r, i) => {
    const row = table.insertRow();
    const cells = [
      names[i], fmt.int(r.steered_runs), fmt.int(r.full_runs),
      r.saved_ms === null ? "n/a" : fmt.ms(r.saved_ms),
      r.top1_hits === null ? "n/a" : `${(100 * r.top1_hits).toFixed(0)}%`,
    ];
    for (const text of cells) row.insertCell().textContent = text;
    saved += r.saved_ms || 0;
  });
  return { saved };
}

function drawModel(model) {
  for (const [name, key] of [["model-s1", "score_at_1"], ["model-s5", "score_at_5"]]) {
    const plot = plotOf(name);
    if (!model || !model.reports.length) {
      message(plot, model ? "The active model has no held-out report." : "No model is active.");
      drawn(plot, 0);
      continue;
    }
    drawn(plot, TPSPlots.bars(plot, {
      categories: model.reports.map((r) => `${r.op} · ${r.holdout.replace(/^(NVIDIA|AMD)\s+/, "")}`),
      series: SOURCES.map(([source, title]) => ({
        name: title,
        values: model.reports.map((r) => r[source]?.[key] ?? null),
      })),
      yLabel: key.replace("score_at_", "score@"),
      format: fmt.score,
      min: 0,
    }));
  }
  if (model) {
    document.getElementById("model-what").textContent =
      `Model v${model.version} (ops: ${model.ops.join(", ")}): best true speed among the first ` +
      "candidate of each ranking over the best overall (1.0 is perfect), on hardware left out " +
      "of training, next to the baselines.";
  }
}

function drawRates(rates) {
  const plot = plotOf("rates");
  const minutes = rates.bucket_s / 60;
  document.getElementById("rates-what").textContent =
    `Probe runs received per minute, and those steered by priors, over the last ` +
    `${rates.window_h} hours, in ${minutes >= 60 ? `${minutes / 60} h` : `${minutes} min`} buckets.`;
  if (!rates.buckets.length) return message(plot, "Nothing received in this window."), drawn(plot, 0);
  const time = (s) => new Date(s).toISOString().slice(5, 16).replace("T", " ");
  drawn(plot, TPSPlots.bars(plot, {
    categories: rates.buckets.map((b) => time(b.start)),
    series: [
      { name: "runs / min", values: rates.buckets.map((b) => b.runs / minutes) },
      { name: "steered by priors / min", values: rates.buckets.map((b) => b.steered_runs / minutes) },
      { name: "measurements / min (÷100)", values: rates.buckets.map((b) => b.measurements / minutes / 100) },
    ],
    yLabel: "per minute",
    format: fmt.rate,
    min: 0,
  }));
}

function tiles(stats, model, saved) {
  const box = document.getElementById("tiles");
  box.replaceChildren();
  const items = [
    [fmt.int(stats.runs), "probe runs"],
    [fmt.int(stats.measurements), "measurements"],
    [fmt.int(stats.hardware), "devices"],
    [fmt.int(stats.problems), "problems"],
    [model ? `v${model.version}` : "none", "active model"],
    [saved === null ? "n/a" : fmt.ms(saved), "probe time saved by priors"],
  ];
  for (const [value, label] of items) {
    const tile = document.createElement("div");
    tile.className = "tile";
    tile.innerHTML = '<div class="value"></div><div class="label"></div>';
    tile.firstChild.textContent = value;
    tile.lastChild.textContent = label;
    box.appendChild(tile);
  }
}

function show(signedIn, error) {
  document.getElementById("token-form").hidden = signedIn;
  document.getElementById("summary").hidden = !signedIn;
  document.getElementById("refresh").hidden = !signedIn;
  document.getElementById("sign-out").hidden = !signedIn;
  for (const section of document.querySelectorAll("[data-section]")) section.hidden = !signedIn;
  document.getElementById("token-error").textContent = error || "";
  document.getElementById("status").textContent = signedIn ? "loading..." : "not signed in";
}

async function load() {
  if (!sessionStorage.getItem(TOKEN_KEY)) return show(false);
  show(true);
  const jobs = {
    stats: getJSON("/v1/stats"),
    coverage: getJSON("/v1/dashboard/coverage"),
    speedups: getJSON("/v1/dashboard/speedups"),
    priors: getJSON("/v1/dashboard/priors"),
    model: getJSON("/v1/dashboard/model"),
    rates: getJSON("/v1/dashboard/rates?window_h=24"),
  };
  const results = Object.fromEntries(
    await Promise.all(Object.entries(jobs).map(async ([k, p]) => {
      try { return [k, { value: await p }]; } catch (error) { return [k, { error }]; }
    })),
  );
  const denied = Object.values(results).find((r) => r.error instanceof Unauthorized);
  if (denied) {
    sessionStorage.removeItem(TOKEN_KEY);
    return show(false, `The service refused the token: ${denied.error.message}`);
  }
  const draw = (key, plotNames, fn) => {
    if (results[key].error) {
      for (const name of plotNames) message(plotOf(name), String(results[key].error), "error");
      return undefined;
    }
    return fn(results[key].value);
  };
  draw("coverage", ["coverage"], drawCoverage);
  draw("speedups", ["speedups"], drawSpeedups);
  const priors = draw("priors", ["priors"], drawPriors);
  draw("model", ["model-s1", "model-s5"], drawModel);
  draw("rates", ["rates"], drawRates);
  if (results.stats.value) tiles(results.stats.value, results.model.value, priors ? priors.saved : null);
  document.getElementById("status").textContent =
    `updated ${new Date().toISOString().slice(11, 19)} UTC`;
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    load();
  });
  document.getElementById("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    show(false);
  });
  document.getElementById("refresh").addEventListener("click", load);
  load();
});
