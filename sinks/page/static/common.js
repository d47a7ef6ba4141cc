// Shared helpers of the live page: DOM building (text only, never HTML strings), fetching, formats.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-")) node.setAttribute(k, String(v));
    else node[k] = v;
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function fetchJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (r.status === 404) return null;
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}

function fmtNum(v, digits) {
  if (v === null || v === undefined) return "–";
  return Number(v).toFixed(digits === undefined ? 0 : digits);
}

function fmtAge(s) {
  if (s === null || s === undefined) return "–";
  if (s < 90) return `${s.toFixed(0)} s`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function rankList(ranks, limit) {
  if (!ranks || !ranks.length) return "–";
  limit = limit || 16;
  const shown = ranks.slice(0, limit).join(", ");
  return ranks.length > limit ? `${shown} (+${ranks.length - limit} more)` : shown;
}

function stateBadge(state, id) {
  return el("span", { class: `state ${state || "unknown"}`, id: id, text: state || "unknown" });
}

function jobHref(job) {
  return `/jobs/${encodeURIComponent(job)}`;
}

// The header's connection line: live feed (Kafka) and history (ClickHouse).
async function showStatus() {
  const box = document.getElementById("feed-status");
  try {
    const s = await fetchJSON("/api/status");
    const live = s.live.connected && !s.live.error
      ? "live state: connected" : `live state: ${s.live.error || "not connected"}`;
    box.textContent = `${live} · history: ${s.history.available ? "available" : "unavailable"}`;
    box.title = s.history.available ? "" : `history (ClickHouse): ${s.history.error}`;
    box.className = "status" + (s.live.connected && !s.live.error ? "" : " bad");
  } catch (e) {
    box.textContent = `the page server does not answer (${e.message})`;
    box.className = "status bad";
  }
}
