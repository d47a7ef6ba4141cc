"""`commwatch status [--job ID]`: the watched jobs' health, from the running stack.

Reads the live page's JSON API (`GET /api/jobs`, `GET /api/jobs/<job>`: the job health
snapshots of docs/architecture.md), found through the data directory's `stack.env`, so
the terminal and the page show the same state. Per job: state, ranks and nodes, step and
iteration rate, and each open incident with its culprit ranks and nodes; with `--job`,
also the most blocked communicators, the latest ranks and the hang's wait chain.

On a terminal it redraws every `--interval` seconds (rich) until Ctrl-C; otherwise, or
with `--once`, it prints plain text (once with `--once`, else one block per interval).
Exit status 1 when no stack or no live page runs (the message names what to start).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from commwatch import discovery
from commwatch.settings import Settings

MAX_JOBS = 20
STATE_STYLE = {"hang": "bold red", "stalled": "bold red", "slow": "bold yellow", "running": "green",
               "starting": "cyan", "ended": "dim"}


class Unavailable(Exception):
    """No live state to show; the message says what to start."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", help="one job, in detail")
    p.add_argument("--once", action="store_true", help="print once and exit (for scripts)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between redraws (default: %(default)s)")


def page_url(settings: Settings) -> str:
    rec = discovery.running_stack(settings.data_dir)
    if rec is None:
        stale = discovery.read_stack(settings.data_dir)
        why = f" (the one recorded there, pid {stale.pid}, is gone)" if stale else ""
        raise Unavailable(f"no commwatch stack runs under {settings.data_dir}{why}; start one with `commwatch up` "
                          "(same COMMWATCH_DATA_DIR)")
    if not rec.page:
        from commwatch.stack import page_available

        how = ("restart it with the page (`commwatch up` without `--without page`)" if page_available()
               else "this installation has no live page (`commwatch page`)")
        raise Unavailable(f"the stack under {settings.data_dir} (pid {rec.pid}) runs without the live page; {how}")
    return rec.page


def fetch(url: str, timeout_s: float = 5.0) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return json.loads(r.read())
    except (OSError, urllib.error.URLError, ValueError) as exc:
        raise Unavailable(f"the live page at {url} does not answer ({exc}); is the stack healthy? "
                          "(see its logs under the data directory)") from None


def snapshots(base: str, job: str | None) -> list[dict]:
    """The health snapshots of the chosen job, or of every job the page lists (at most 20)."""
    if job:
        names = [job]
    else:
        listed = fetch(urllib.parse.urljoin(base, "api/jobs"))
        items = listed.get("jobs", []) if isinstance(listed, dict) else listed
        names = [j["job"] if isinstance(j, dict) else str(j) for j in items][:MAX_JOBS]
    out = []
    for name in names:
        try:
            snap = fetch(urllib.parse.urljoin(base, "api/jobs/" + urllib.parse.quote(name, safe="")))
        except Unavailable:
            if job:
                raise Unavailable(f"the live page knows no job {job!r}") from None
            continue
        if isinstance(snap, dict):
            out.append(_snapshot(snap))
    return out


def _snapshot(doc: dict) -> dict:
    """The health snapshot in a `/api/jobs/<job>` answer: the document itself, or its
    `health`, with the document's own `incidents` list when it has one."""
    snap = dict(doc.get("health") or doc)
    if isinstance(doc.get("incidents"), list):
        snap["incidents"] = doc["incidents"]
    return snap


def _num(v: Any, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def job_lines(snap: dict, detail: bool) -> list[tuple[str, str]]:
    """(text, rich style) lines for one job."""
    step = snap.get("step") or {}
    state = str(snap.get("state", "?"))
    nodes = snap.get("nodes") or []
    ranks = f"{snap.get('ranks', '?')}/{snap.get('world_size', '?')}"
    exited = snap.get("exited_ranks") or []
    head = (f"{snap.get('job', '?')}  {state.upper()}  ranks {ranks} on {len(nodes)} node(s)"
            f"{f', {len(exited)} exited' if exited else ''}  iteration {_num(step.get('iteration'), 'd')}"
            f"  {_num(step.get('rate_per_s'), '.2f')} it/s  step {_num(step.get('median_s'), '.3f')} s"
            f"  slowdown {_num(step.get('slowdown'), '+.0%')}")
    if step.get("paused_s"):
        head += f"  paused {step['paused_s']:.0f} s (no rank in a call: a checkpoint?)"
    lines = [(head, STATE_STYLE.get(state, ""))]
    incidents = [i for i in snap.get("incidents") or [] if i.get("status") != "resolved"]
    for inc in incidents:
        culprits = ",".join(map(str, inc.get("culprit_ranks") or [])) or "-"
        on = ",".join(inc.get("culprit_nodes") or []) or "-"
        opened = inc.get("opened_ns")
        when = time.strftime("%H:%M:%S", time.localtime(opened / 1e9)) if isinstance(opened, int) else "?"
        lines.append((f"  {inc.get('severity', '?')} {inc.get('kind', '?')} since {when}: culprit rank(s) {culprits} "
                      f"on {on}: {inc.get('summary', '')}", "red" if inc.get("severity") in ("P0", "P1") else "yellow"))
    if not incidents:
        lines.append(("  no open incident", "dim"))
    if detail:
        chain = snap.get("wait_chain") or {}
        if chain.get("roots"):
            lines.append((f"  wait chain: roots {chain['roots']}, {len(chain.get('edges') or [])} waits, blocked comms "
                          f"{', '.join(chain.get('blocked_comms') or [])}", ""))
        for c in (snap.get("comms") or [])[:5]:
            lines.append((f"  comm {c.get('comm')}: {c.get('members')} members, completed {c.get('completed')}, "
                          f"{c.get('inside')} inside, blocked {_num(c.get('blocked_s'), '.1f')} s", ""))
        late = snap.get("late_ranks") or []
        if late:
            lines.append(("  latest ranks: " + ", ".join(f"{r.get('rank')} ({_num(r.get('lag_ms'), '.1f')} ms)"
                                                          for r in late[:8]), ""))
    return lines


def render(base: str, snaps: list[dict], detail: bool) -> list[tuple[str, str]]:
    lines = [(f"commwatch status {time.strftime('%H:%M:%S')}: {len(snaps)} job(s); live page {base}", "bold")]
    if not snaps:
        lines.append(("  no job watched yet (start training with the hook or plugin; see `commwatch up`'s output)",
                      "dim"))
    for snap in snaps:
        lines += job_lines(snap, detail)
    return lines


def plain(lines: list[tuple[str, str]]) -> str:
    return "\n".join(text for text, _ in lines)


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        base = page_url(settings)
        lines = render(base, snapshots(base, args.job), bool(args.job))
    except Unavailable as exc:
        print(f"commwatch status: {exc}", file=sys.stderr)
        return 1
    if args.once or not sys.stdout.isatty():
        print(plain(lines), flush=True)
        if args.once:
            return 0
        return _repeat_plain(args, base)
    return _live(args, base, lines)


def _repeat_plain(args: argparse.Namespace, base: str) -> int:
    try:
        while True:
            time.sleep(args.interval)
            try:
                print(plain(render(base, snapshots(base, args.job), bool(args.job))), flush=True)
            except Unavailable as exc:
                print(f"commwatch status: {exc}", flush=True)
    except KeyboardInterrupt:
        return 0


def _live(args: argparse.Namespace, base: str, lines: list[tuple[str, str]]) -> int:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    def text(ls: list[tuple[str, str]]) -> Text:
        out = Text()
        for i, (t, style) in enumerate(ls):
            out.append(("\n" if i else "") + t, style=style or None)
        return out

    try:
        with Live(text(lines), console=Console(), refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(args.interval)
                try:
                    live.update(text(render(base, snapshots(base, args.job), bool(args.job))))
                except Unavailable as exc:
                    live.update(text([(f"commwatch status: {exc}", "bold red")]))
    except KeyboardInterrupt:
        return 0
