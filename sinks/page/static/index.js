// The list of jobs (/): one row per job from GET /api/jobs, refreshed every 2 s.
"use strict";

function incidentsCell(open) {
  if (!open.length) return el("td", { class: "muted", text: "none" });
  return el("td", {}, ...open.map((i, n) => el("div", {},
    el("span", { class: `sev ${i.severity}`, text: i.severity }), ` ${i.kind} · culprit ranks `,
    el("span", { class: "culprits", text: rankList(i.culprit_ranks, 8) }))));
}

function jobRow(j) {
  return el("tr", { class: j.stale ? "stale" : "", "data-job": j.job },
    el("td", {}, el("a", { href: jobHref(j.job), text: j.job })),
    el("td", {}, stateBadge(j.stale && j.state !== "ended" ? `${j.state}?` : j.state)),
    el("td", { class: "num", text: j.world_size && j.world_size !== j.ranks ? `${j.ranks}/${j.world_size}` : fmtNum(j.ranks) }),
    el("td", { class: "num", text: fmtNum(j.nodes) }),
    el("td", { class: "num", text: fmtNum(j.iteration) }),
    el("td", { class: "num", text: fmtNum(j.rate_per_s, 2) }),
    incidentsCell(j.open_incidents || []),
    el("td", { class: "num", text: j.age_s === null ? "not live" : `${fmtAge(j.age_s)} ago` }));
}

async function refresh() {
  try {
    const jobs = await fetchJSON("/api/jobs");
    document.querySelector("#jobs tbody").replaceChildren(...jobs.map(jobRow));
    document.getElementById("no-jobs").hidden = jobs.length > 0;
  } catch (e) {
    // showStatus() reports an unreachable server
  }
  await showStatus();
  setTimeout(refresh, 2000);
}

refresh();
