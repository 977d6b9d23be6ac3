// The Usage page (#/usage): your model calls and tool use over the last 7, 30 or 90 days, from
// GET /api/usage (grouped by day, by model and by tool). Totals first (calls, tokens, cost,
// latency, fallbacks, errors), then charts drawn here as inline SVG (offline, no chart library):
// tokens and cost per day, latency p50/p95 per day, calls per model and tool use.
//
// Everything from the server is set as text or as numeric SVG attributes.

import { api } from "./api.js";
import { el, formatDuration, svgEl as svg } from "./dom.js";

const WIDTH = 640;
const HEIGHT = 120;
const BAR_ROW = 40;

const number = (value) => Math.round(value ?? 0).toLocaleString();
const dollars = (value) => `$${(value ?? 0).toFixed(value >= 1 ? 2 : 4)}`;
const ms = (value) =>
  value === null || value === undefined ? "–" : value >= 10000 ? formatDuration(value) : `${number(value)} ms`;

/** Vertical bars per day, one or more series stacked (tokens) or side by side (latency). */
function dayChart(title, days, series, { stacked = false, format = number } = {}) {
  const totals = days.map((day) =>
    stacked ? series.reduce((sum, s) => sum + (day[s.key] ?? 0), 0) : Math.max(...series.map((s) => day[s.key] ?? 0)),
  );
  const top = Math.max(...totals, 0) || 1;
  const slot = WIDTH / Math.max(days.length, 1);
  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT + 18}`, class: "usage-chart", role: "img" });
  const summary = `${title}: highest ${format(Math.max(...totals, 0))} on a day`;
  chart.setAttribute("aria-label", summary);
  chart.append(svg("title", {}, summary));
  days.forEach((day, i) => {
    let base = HEIGHT;
    series.forEach((s, j) => {
      const value = day[s.key] ?? 0;
      const height = (value / top) * HEIGHT;
      const width = stacked ? slot * 0.7 : (slot * 0.7) / series.length;
      const x = i * slot + slot * 0.15 + (stacked ? 0 : j * width);
      const y = stacked ? base - height : HEIGHT - height;
      if (stacked) base -= height;
      if (value > 0) {
        const bar = svg("rect", { x, y, width: Math.max(width, 1), height, class: `usage-bar ${s.class}` });
        bar.append(svg("title", {}, `${day.key}: ${s.label} ${format(value)}`));
        chart.append(bar);
      }
    });
  });
  chart.append(svg("line", { x1: 0, y1: HEIGHT, x2: WIDTH, y2: HEIGHT, class: "usage-axis" }));
  if (days.length) {
    chart.append(svg("text", { x: 0, y: HEIGHT + 14, class: "usage-label" }, days[0].key));
    chart.append(svg("text", { x: WIDTH, y: HEIGHT + 14, class: "usage-label end" }, days.at(-1).key));
  }
  const legend = el("p", { class: "usage-legend" },
    series.map((s) => el("span", { class: `usage-key ${s.class}`, text: s.label })));
  return el("figure", { class: "usage-figure" }, el("figcaption", { text: title }), chart, legend);
}

/** Horizontal bars, one per row (a model, a tool): its name and figures above its bar. */
function barList(title, rows, value, describe, empty) {
  if (!rows.length) return el("figure", { class: "usage-figure" }, el("figcaption", { text: title }), el("p", { class: "usage-empty", text: empty }));
  const top = Math.max(...rows.map(value)) || 1;
  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${rows.length * BAR_ROW}`, class: "usage-chart", role: "img" });
  chart.setAttribute("aria-label", `${title}: ${rows.map((r) => `${r.key} ${describe(r)}`).join("; ")}`);
  rows.forEach((row, i) => {
    const y = i * BAR_ROW;
    chart.append(svg("text", { x: 0, y: y + 14, class: "usage-label" }, row.key || "(none)"));
    chart.append(svg("text", { x: WIDTH, y: y + 14, class: "usage-label end" }, describe(row)));
    chart.append(svg("rect", { x: 0, y: y + 20, width: Math.max((value(row) / top) * WIDTH, 1), height: 10, class: "usage-bar calls" }));
  });
  return el("figure", { class: "usage-figure" }, el("figcaption", { text: title }), chart);
}

export function createUsagePage() {
  const range = document.getElementById("usage-range");
  const totals = document.getElementById("usage-totals");
  const charts = document.getElementById("usage-charts");
  let ticket = 0;

  async function load() {
    const mine = ++ticket;
    const days = Number(range.value);
    const to = new Date();
    const from = new Date(to.getTime() - (days - 1) * 86400000);
    const iso = (date) => date.toISOString().slice(0, 10);
    const query = { from: iso(from), to: iso(to) };
    charts.setAttribute("aria-busy", "true");
    try {
      const [byDay, byModel, byTool] = await Promise.all(
        ["day", "model", "tool"].map((group_by) => api.usage({ ...query, group_by })),
      );
      if (mine !== ticket) return;
      render(byDay, byModel, byTool);
    } catch (error) {
      if (mine !== ticket) return;
      charts.replaceChildren(el("p", { class: "memory-note error-text", role: "alert", text: `Could not load your usage: ${error.message}` }));
    } finally {
      if (mine === ticket) charts.setAttribute("aria-busy", "false");
    }
  }

  function render(byDay, byModel, byTool) {
    const t = byDay.totals;
    const figure = (label, value, id) => el("div", { class: "usage-total" }, el("dt", { text: label }), el("dd", { text: value, dataset: { figure: id } }));
    totals.replaceChildren(
      figure("Model calls", number(t.calls), "calls"),
      figure("Tokens in / out", `${number(t.prompt_tokens)} / ${number(t.completion_tokens)}`, "tokens"),
      figure("Cost", dollars(t.cost), "cost"),
      figure("Latency p50 / p95", `${ms(t.latency_p50_ms)} / ${ms(t.latency_p95_ms)}`, "latency"),
      figure("First token p50", ms(t.ttft_p50_ms), "ttft"),
      figure("Fallbacks", number(t.fallbacks), "fallbacks"),
      figure("Errors", number(t.errors), "errors"),
    );
    if (!t.calls) {
      charts.replaceChildren(el("p", { class: "usage-empty", text: "No model calls in this period yet. Send a message and come back." }));
      return;
    }
    charts.replaceChildren(
      dayChart("Tokens per day", byDay.groups, [
        { key: "prompt_tokens", label: "in", class: "prompt" },
        { key: "completion_tokens", label: "out", class: "completion" },
      ], { stacked: true }),
      t.cost > 0
        ? dayChart("Cost per day", byDay.groups, [{ key: "cost", label: "USD", class: "cost" }], { format: dollars })
        : el("figure", { class: "usage-figure" }, el("figcaption", { text: "Cost per day" }),
          el("p", { class: "usage-empty", text: "Nothing to pay in this period: the models that answered have no price (the local model is free)." })),
      dayChart("Latency per day", byDay.groups, [
        { key: "latency_p50_ms", label: "p50", class: "prompt" },
        { key: "latency_p95_ms", label: "p95", class: "completion" },
      ], { format: ms }),
      barList("Calls per model", byModel.groups, (r) => r.calls,
        (r) => `${number(r.calls)} calls · ${number(r.prompt_tokens + r.completion_tokens)} tokens · p50 ${ms(r.latency_p50_ms)}${r.fallbacks ? ` · ${r.fallbacks} fallbacks` : ""}`,
        ""),
      barList("Tool use", byTool.groups, (r) => r.calls,
        (r) => `${number(r.calls)} calls${r.errors ? ` · ${r.errors} failed` : ""} · p50 ${ms(r.duration_p50_ms)}`,
        "No tools used in this period."),
    );
  }

  range.addEventListener("change", load);
  return { show: load, hide() { ticket += 1; } };
}
