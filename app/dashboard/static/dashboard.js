// Speedwatch dashboard: draws the Plotly figures the server rendered as JSON, keeps the
// token for this tab, acknowledges/resolves regressions through the API, and follows a
// running run's progress. No framework: the pages are server-rendered.
"use strict";

const TOKEN_KEY = "speedwatch.token";
const PLOT_CONFIG = { displaylogo: false, responsive: true };

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function figureFrom(id) {
  const node = document.getElementById(id);
  return node ? JSON.parse(node.textContent) : null;
}

function drawCharts() {
  for (const el of document.querySelectorAll(".js-chart")) {
    const figure = figureFrom(el.dataset.figure);
    if (figure) {
      Plotly.newPlot(el, figure.data, figure.layout, PLOT_CONFIG);
    }
  }
}

function setupLatencyToggle() {
  const button = document.getElementById("toggle-latency");
  if (!button) return;
  const target = document.getElementById(button.dataset.target);
  const title = document.getElementById("chart-title");
  const views = [
    { figure: figureFrom(target.dataset.figure), title: title.textContent, label: button.textContent },
    { figure: figureFrom(button.dataset.alt), title: button.dataset.altTitle, label: button.dataset.altLabel },
  ];
  let showing = 0;
  button.addEventListener("click", () => {
    showing = 1 - showing;
    const view = views[showing];
    Plotly.react(target, view.figure.data, view.figure.layout, PLOT_CONFIG);
    title.textContent = view.title;
    button.textContent = showing ? views[1].label : views[0].label;
    button.setAttribute("aria-pressed", showing ? "true" : "false");
  });
}

function setupTokenForm() {
  const form = document.getElementById("token-form");
  const input = document.getElementById("token-input");
  const state = document.getElementById("token-state");
  const show = () => { state.textContent = token() ? "saved for this tab" : "none saved"; };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    input.value = "";
    // Pages are read with a cookie the server sets (HttpOnly: no script reads it back);
    // the tab keeps the token for the actions, which send it as a bearer header.
    const kept = await fetch("/session/token", {
      method: "POST", headers: { Authorization: `Bearer ${value}` } });
    if (!kept.ok) {
      let detail = `HTTP ${kept.status}`;
      try { detail = (await kept.json()).detail || detail; } catch (_) { /* not JSON */ }
      state.textContent = `not saved: ${detail}`;
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, value);
    show();
  });
  document.getElementById("token-clear").addEventListener("click", async () => {
    sessionStorage.removeItem(TOKEN_KEY);
    await fetch("/session/forget", { method: "POST" });
    show();
  });
  show();
}

async function api(method, path) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(path, { method, headers });
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  return { ok: response.ok, status: response.status, body };
}

function setupRegressionActions() {
  for (const button of document.querySelectorAll("button[data-action]")) {
    button.addEventListener("click", async () => {
      const box = button.closest(".actions");
      const message = box.querySelector(".act-msg");
      if (!token()) {
        message.textContent = "paste a token with the ci scope into the token field first";
        message.className = "act-msg error";
        return;
      }
      const id = button.dataset.regressionId;
      box.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      message.textContent = "...";
      const result = await api("POST", `/api/v1/regressions/${id}/${button.dataset.action}`);
      if (result.ok) {
        const row = document.getElementById(`regression-${id}`);
        const status = result.body.status;
        row.dataset.status = status;
        const cell = row.querySelector(".status-cell");
        cell.innerHTML = "";
        const badge = document.createElement("span");
        badge.className = `badge badge-${status}`;
        badge.textContent = status;
        cell.appendChild(badge);
        if (result.body.acknowledged_by) {
          const by = document.createElement("div");
          by.className = "muted small";
          by.textContent = `by ${result.body.acknowledged_by}`;
          cell.appendChild(by);
        }
        box.querySelectorAll("button").forEach((b) => {
          b.disabled = false;
          if (b.dataset.action === "acknowledge" || status === "resolved") b.remove();
        });
        message.textContent = status;
        message.className = "act-msg ok";
      } else {
        box.querySelectorAll("button").forEach((b) => { b.disabled = false; });
        const detail = result.body && result.body.detail ? result.body.detail : `HTTP ${result.status}`;
        message.textContent = detail;
        message.className = "act-msg error";
      }
    });
  }
}

function followRun() {
  const box = document.querySelector("[data-live-run]");
  if (!box) return;
  const id = box.dataset.liveRun;
  const tick = async () => {
    const result = await api("GET", `/api/v1/runs/${id}`);
    if (!result.ok) {
      document.getElementById("live-note").textContent = `live updates stopped: HTTP ${result.status}`;
      return;
    }
    const run = result.body;
    const p = run.progress;
    const finished = (p.done || 0) + (p.failed || 0) + (p.skipped || 0);
    document.getElementById("progress-bar").style.width = `${p.total ? (100 * finished) / p.total : 0}%`;
    document.getElementById("progress-text").textContent =
      `${finished} of ${p.total} cells finished · ${p.queued || 0} queued · ${p.running || 0} running`;
    if (run.status === "done" || run.status === "failed") {
      window.location.reload();
      return;
    }
    setTimeout(tick, 2000);
  };
  setTimeout(tick, 2000);
}

function followSweep() {
  // A running sweep or bisect: reload when another run finished or it ended.
  const box = document.querySelector("[data-live-sweep]");
  if (!box) return;
  const id = box.dataset.liveSweep;
  let seen = null;
  const tick = async () => {
    const result = await api("GET", `/api/v1/sweeps/${id}`);
    if (!result.ok) {
      document.getElementById("live-note").textContent = `live updates stopped: HTTP ${result.status}`;
      return;
    }
    const p = result.body.progress;
    const state = `${result.body.status}:${(p.done || 0) + (p.failed || 0)}:${p.total}`;
    if (seen !== null && state !== seen) {
      window.location.reload();
      return;
    }
    seen = state;
    setTimeout(tick, 5000);
  };
  setTimeout(tick, 1000);
}

function setupSweepCancel() {
  for (const button of document.querySelectorAll("button[data-sweep-cancel]")) {
    button.addEventListener("click", async () => {
      const message = button.closest(".actions").querySelector(".act-msg");
      if (!token()) {
        message.textContent = "paste a token with the ci scope into the token field first";
        message.className = "act-msg error";
        return;
      }
      button.disabled = true;
      message.textContent = "...";
      const result = await api("POST", `/api/v1/sweeps/${button.dataset.sweepCancel}/cancel`);
      if (result.ok) {
        window.location.reload();
      } else {
        button.disabled = false;
        message.textContent = result.body && result.body.detail ? result.body.detail : `HTTP ${result.status}`;
        message.className = "act-msg error";
      }
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  setupTokenForm();
  drawCharts();
  setupLatencyToggle();
  setupRegressionActions();
  followRun();
  followSweep();
  setupSweepCancel();
});

// Filters submit their form when changed (a listener, not an inline handler: the pages'
// content security policy allows no inline script).
document.querySelectorAll("select[data-autosubmit]").forEach((select) => {
  select.addEventListener("change", () => select.form.submit());
});
