// One job (/jobs/<job>): GET /api/jobs/<job> every second, rendered into the sections of job.html.
"use strict";

const JOB = document.getElementById("job-page").dataset.job;
const MAX_COMMS_SHOWN = 64;
const MAX_CHAIN_DEPTH = 6;

function summaryItem(label, value) {
  return el("div", {}, el("dt", { text: label }), el("dd", { text: value }));
}

function renderSummary(data) {
  const h = data.health;
  document.getElementById("state-slot").replaceChildren(stateBadge(h ? h.state : "unknown", "state"));
  const note = document.getElementById("stale-note");
  note.hidden = !data.stale;
  note.textContent = !h ? "No live health for this job: it is not running now, or no worker watches it. Incidents below come from the history."
    : `No health snapshot received for ${data.age_s === null ? "a while" : fmtAge(data.age_s)}: the job has ended, or its worker is down. What follows is the last one.`;
  if (!h) { document.getElementById("summary").replaceChildren(); return; }
  const step = h.step || {};
  document.getElementById("summary").replaceChildren(...[
    summaryItem("ranks", h.world_size && h.world_size !== h.ranks ? `${h.ranks} of ${h.world_size}` : fmtNum(h.ranks)),
    summaryItem("nodes", fmtNum((h.nodes || []).length)),
    summaryItem("iteration", fmtNum(step.iteration)),
    summaryItem("iterations/s", fmtNum(step.rate_per_s, 2)),
    summaryItem("median step", step.median_s === null || step.median_s === undefined ? "–" : `${fmtNum(step.median_s, 2)} s`),
    summaryItem("communicators", fmtNum((h.comms || []).length)),
    summaryItem("exited ranks", fmtNum((h.exited_ranks || []).length)),
    step.paused_s ? summaryItem("paused", `${fmtNum(step.paused_s, 0)} s, no rank in a call`) : null,
    summaryItem("updated", data.age_s === null ? "not live" : `${fmtAge(data.age_s)} ago`)].filter(Boolean));
}

function openedText(inc, nowNs) {
  if (!inc.opened_ns) return "–";
  if (nowNs) return fmtAge(Math.max(0, (nowNs - inc.opened_ns) / 1e9));
  return new Date(inc.opened_ns / 1e6).toISOString().replace("T", " ").slice(0, 19);
}

function incidentRow(inc, nowNs, withStatus) {
  return el("tr", { "data-incident": inc.incident, "data-kind": inc.kind, "data-status": inc.status },
    withStatus ? el("td", { text: inc.status }) : null,
    el("td", {}, el("span", { class: `sev ${inc.severity}`, text: inc.severity })),
    el("td", { text: inc.kind }),
    el("td", { class: "culprits culprit-ranks", text: rankList(inc.culprit_ranks) }),
    el("td", { class: "culprit-nodes", text: (inc.culprit_nodes || []).join(", ") || "–" }),
    withStatus ? null : el("td", { class: "mono", text: inc.comm || "–" }),
    el("td", { class: withStatus ? "" : "num", text: withStatus ? openedText(inc, null) : openedText(inc, nowNs) }),
    el("td", { text: inc.summary || "" }));
}

function renderIncidents(data) {
  const nowNs = data.health ? data.health.ts_ns : null;
  const open = data.incidents.filter((i) => i.status !== "resolved");
  const past = data.incidents.filter((i) => i.status === "resolved");
  const openBody = document.querySelector("#open-incidents tbody");
  openBody.replaceChildren(...(open.length ? open.map((i) => incidentRow(i, nowNs, false))
    : [el("tr", {}, el("td", { colSpan: 7, class: "empty", text: "none" }))]));
  const pastBody = document.querySelector("#recent-incidents tbody");
  pastBody.replaceChildren(...(past.length ? past.map((i) => incidentRow(i, nowNs, true))
    : [el("tr", {}, el("td", { colSpan: 7, class: "empty", text: "none" }))]));
  const hist = data.history || {};
  document.getElementById("history-note").textContent = hist.available
    ? "Resolved incidents from the stream since this page started, and from the history (ClickHouse)."
    : `History unavailable (${hist.error || "not configured"}): only incidents seen on the stream since this page started.`;
}

// The wait-for chain: roots first, then the ranks waiting on them, grouped by communicator.
function renderWaitChain(h) {
  const section = document.getElementById("wait-chain-section");
  const chain = h && h.wait_chain;
  section.hidden = !chain;
  if (!chain) return;
  const waitersOf = new Map();  // waited-for rank -> Map(comm -> [waiters])
  for (const [waiter, waitedFor, comm] of chain.edges) {
    if (!waitersOf.has(waitedFor)) waitersOf.set(waitedFor, new Map());
    const byComm = waitersOf.get(waitedFor);
    if (!byComm.has(comm)) byComm.set(comm, []);
    byComm.get(comm).push(waiter);
  }
  const hang = (h.incidents || []).find((i) => i.kind === "hang");
  const seen = new Set(chain.roots);
  function subtree(rank, depth) {
    const byComm = waitersOf.get(rank);
    if (!byComm || depth >= MAX_CHAIN_DEPTH) return null;
    const items = [];
    for (const [comm, waiters] of byComm) {
      const fresh = [...new Set(waiters)].filter((w) => !seen.has(w)).sort((a, b) => a - b);
      if (!fresh.length) continue;
      fresh.forEach((w) => seen.add(w));
      const li = el("li", { "data-comm": comm },
        "← ", el("span", { class: "mono", text: `rank${fresh.length > 1 ? "s" : ""} ${rankList(fresh)}` }),
        ` wait${fresh.length > 1 ? "" : "s"} for rank ${rank} in communicator `, el("code", { text: comm }));
      if (fresh.length <= 8) {
        const below = fresh.map((w) => subtree(w, depth + 1)).filter(Boolean);
        below.forEach((ul) => li.append(ul));
      }
      items.push(li);
    }
    return items.length ? el("ul", { class: "chain" }, ...items) : null;
  }
  const top = el("ul", { class: "chain top" }, ...chain.roots.map((root) => el("li", { "data-root": root },
    el("span", { class: "root", text: `root: rank ${root}` }),
    hang && hang.culprit_nodes && hang.culprit_nodes.length ? ` on ${hang.culprit_nodes.join(", ")}` : "",
    " — inside no call; the others wait for it",
    subtree(root, 0))));
  const blocked = el("p", { class: "muted" },
    `Blocked communicators: ${chain.blocked_comms.length ? chain.blocked_comms.join(", ") : "none"}; ` +
    `${chain.edges.length} wait-for edge(s).`);
  document.getElementById("wait-chain").replaceChildren(top, blocked);
}

function renderComms(h) {
  const body = document.querySelector("#comms tbody");
  const comms = (h && h.comms) || [];
  if (!comms.length) {
    body.replaceChildren(el("tr", {}, el("td", { colSpan: 7, class: "empty", text: "no communicator reported yet" })));
    return;
  }
  const rows = comms.slice(0, MAX_COMMS_SHOWN).map((c) => {
    const blocked = c.blocked_s > 0;
    const since = c.last_progress_ns ? (h.ts_ns - c.last_progress_ns) / 1e9 : null;
    return el("tr", { "data-comm": c.comm, "data-blocked": blocked },
      el("td", {}, el("code", { text: c.comm })),
      el("td", { class: "num", text: fmtNum(c.members) }),
      el("td", { text: (c.nodes || []).join(", ") || "–" }),
      el("td", {}, blocked
        ? el("span", { class: "state hang", text: c.started >= 0 ? `waiting in collective #${c.started}` : "waiting in send/recv" })
        : el("span", { class: "muted", text: "progressing" })),
      el("td", { class: "num", text: !blocked ? "–" : c.started >= 0 ? `${c.inside} of ${c.members}` : `${c.inside} call(s)` }),
      el("td", { class: "num", text: blocked ? `${fmtNum(c.blocked_s, 1)} s` : "–" }),
      el("td", { class: "num", text: since === null ? "–" : `${fmtAge(Math.max(0, since))} ago` }));
  });
  if (comms.length > MAX_COMMS_SHOWN) {
    rows.push(el("tr", {}, el("td", { colSpan: 7, class: "muted", text: `+${comms.length - MAX_COMMS_SHOWN} more (the most blocked are shown)` })));
  }
  body.replaceChildren(...rows);
}

function renderLateRanks(h) {
  const late = ((h && h.late_ranks) || []).filter((r) => r.lag_ms >= 0.05);
  document.getElementById("late-ranks").textContent = late.length
    ? late.slice(0, 8).map((r) => `${r.rank} (${r.lag_ms.toFixed(1)} ms)`).join(", ") : "–";
}

const heatmap = new Heatmap(document.getElementById("heatmap"), JOB);

async function refresh() {
  try {
    const data = await fetchJSON(`/api/jobs/${encodeURIComponent(JOB)}`);
    if (data) {
      renderSummary(data);
      renderIncidents(data);
      renderWaitChain(data.health);
      renderComms(data.health);
      renderLateRanks(data.health);
      if (data.health) heatmap.ranks = data.health.world_size || 0;
      await heatmap.update();
    } else {
      const note = document.getElementById("stale-note");
      note.hidden = false;
      note.textContent = "This job is unknown: no live health and no incident in the history.";
    }
  } catch (e) {
    // showStatus() says what is unreachable
  }
  await showStatus();
  setTimeout(refresh, 1000);
}

refresh();
