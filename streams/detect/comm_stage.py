"""Stage 1: one `CommState` per (job, comm); turns calls and heartbeats into compact reports.

Reports (JSON-able dicts, each with "type", "job", "ts_ns"):

- `window`: per-rank window features of a communicator (see `windows.py`).
- `p2p_window`: per-rank waits in paired SEND/RECV calls: `impact` (waiting caused, chained), `own`.
- `wait`: ranks inside a call for a while: `comm`, `seq`, `op`, `since_ns`, `p2p_seq`
  (when only P2P waits: `op` is what the missing peer never entered, `seq` is -1),
  `threshold_ns`, `inside` ([[rank, since_ns, peer_rank], ...], peer -1 for collectives),
  `missing` (ranks that never entered what the others wait in), `unknown` (members never
  seen), `nodes`. Sent at every tick while the wait lasts.
- `wait_clear`: the comm's wait is over (`comm`).
- `comm`: every few seconds per comm: `members`, `nodes`, `last_progress_ns`,
  `gap_p50_ns`, `threshold_ns`.
- `node`: a node's heartbeat (`node`, `ranks`), at most once per heartbeat period.
"""

from __future__ import annotations

import numpy as np

from commwatch import wire
from commwatch.decode import CallBatch
from commwatch.settings import Settings
from commwatch.streams.detect.comm_state import WINDOW_MIN_NS, CommState
from commwatch.streams.detect.windows import p2p_report, window_report

TICK_NS = 500_000_000
FLUSH_RECORDS = 8192
TICK_FLUSH_RECORDS = 1024  # at a tick, a comm's pending records are applied once this many...
TICK_FLUSH_AGE_NS = 2_000_000_000  # ...or the oldest this old, a window due or a wait seen (`_due`)
COMM_REPORT_NS = 5_000_000_000
PRUNE_NS = 10_000_000_000  # idle state is looked for this often (event time)
WAIT_REPORT_FRACTION = 0.2  # report a wait once it reaches this share of the hang threshold


class CommStage:
    """Stage 1 over many (job, comm): `feed` calls and heartbeats, `tick` for time passing.

    >>> from commwatch.settings import Settings
    >>> stage = CommStage(Settings.load(env={}))
    >>> stage.tick(10**18)
    []
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.comms: dict[tuple[str, int], CommState] = {}
        self._node_seen: dict[tuple[str, str], int] = {}
        self._waiting: set[tuple[str, int]] = set()
        self.last_tick = 0
        self._comm_reported: dict[tuple[str, int], int] = {}
        self._dirty: set[tuple[str, int]] = set()
        self._last_prune = 0

    def state(self, job: str, comm: int) -> CommState:
        st = self.comms.get((job, comm))
        if st is None:
            st = self.comms[(job, comm)] = CommState(job, comm, self.settings.window_instances)
        return st

    # ------------------------------------------------------------------------------
    def feed(self, msg, decoded, now_ns: int) -> list[dict]:
        if isinstance(decoded, CallBatch):
            return self.feed_calls(decoded, now_ns)
        if isinstance(decoded, dict) and "ranks" in decoded and "node" in decoded:
            return self.feed_progress(decoded, now_ns)
        return []

    def feed_calls(self, batch: CallBatch, now_ns: int) -> list[dict]:
        """Buffer the batch; small batches of one comm are folded in together (at a tick, see
        `_due`, or once `FLUSH_RECORDS` are pending), so the per-batch numpy overhead is paid rarely."""
        key = (batch.job, batch.comm)
        st = self.comms.get(key) or self.state(batch.job, batch.comm)
        st.last_seen_ns = now_ns
        if not st.pending:
            st.pending_since = now_ns
            self._dirty.add(key)
        st.pending.append(batch.value)
        st.pending_n += batch.count
        if st.pending_n >= FLUSH_RECORDS:
            return self._flush(st, now_ns)
        return []

    def _flush(self, st: CommState, now_ns: int) -> list[dict]:
        self._dirty.discard((st.job, st.comm))
        if not st.pending:
            return []
        h = wire.BATCH_HEADER_SIZE
        recs = np.frombuffer(b"".join([v[h:] for v in st.pending]), dtype=wire.RECORD_DTYPE)
        st.pending, st.pending_n = [], 0
        out: list[dict] = []
        for a, b in st.apply_records(recs):
            rep = window_report(st, a, b, now_ns)
            if rep is not None:
                out.append(rep)
        if st.p2p and now_ns - st.p2p_win_start >= WINDOW_MIN_NS:
            rep = p2p_report(st, now_ns)
            if rep is not None:
                out.append(rep)
        return out

    def feed_progress(self, hb: dict, now_ns: int) -> list[dict]:
        job, node = hb["job"], hb["node"]
        st = self.state(job, int(hb["comm"], 16))
        st.last_seen_ns = now_ns
        ts = hb["ts_ns"]
        ranks = []
        for r in hb["ranks"]:
            g = r["rank"]
            ranks.append(g)
            st.node_of[g] = node
            c = st.g2c.get(g)
            if c is None:
                continue
            if r["started"] > st.started[c]:
                st.started[c] = r["started"]
                st.t_in[c] = r.get("t_last_start_ns") or ts
            if r["completed"] > st.completed[c]:
                st.completed[c] = r["completed"]
                st.last_progress_ns = max(st.last_progress_ns, r.get("t_last_end_ns") or ts)
            for p in r.get("p2p") or ():
                key = (c, p["peer"], 1 if p["op"].lower() == "recv" else 0)
                s = st.p2p.get(key)
                if s is None:
                    s = st.p2p[key] = [-1, -1, 0]
                if p["started"] > s[0]:
                    s[0], s[2] = p["started"], ts
                s[1] = max(s[1], p["completed"])
        last = self._node_seen.get((job, node), 0)
        if ts - last >= self.settings.heartbeat_period_s * 1e9 * 0.9:
            self._node_seen[(job, node)] = ts
            return [{"type": "node", "job": job, "ts_ns": int(ts), "node": node, "ranks": sorted(ranks)}]
        return []

    # ------------------------------------------------------------------------------
    def threshold_ns(self, st: CommState) -> float:
        _, p99 = st.gap_quantiles()
        return max(self.settings.hang_floor_s * 1e9, self.settings.hang_gap_factor * p99)

    def tick(self, now_ns: int) -> list[dict]:
        if now_ns - self.last_tick < TICK_NS:
            return []
        self.last_tick = now_ns
        out: list[dict] = []
        for key in sorted(self._dirty):
            st = self.comms[key]
            if self._due(st, now_ns):
                out.extend(self._flush(st, now_ns))
        for key, st in self.comms.items():
            if now_ns - self._comm_reported.get(key, 0) >= COMM_REPORT_NS:
                self._comm_reported[key] = now_ns
                out.append(self.comm_report(st, now_ns))
            rep = self.wait_report(st, now_ns)
            if rep is not None:
                self._waiting.add(key)
                out.append(rep)
            elif key in self._waiting:
                self._waiting.discard(key)
                out.append({"type": "wait_clear", "job": st.job, "ts_ns": int(now_ns), "comm": st.hex})
        if now_ns - self._last_prune >= PRUNE_NS:
            self._last_prune = now_ns
            self.prune(now_ns)
        return out

    def _due(self, st: CommState, now_ns: int) -> bool:
        """Whether a comm's pending records are applied at this tick: a new comm, enough of
        them, the oldest old enough, a window (collective or P2P) that may close, or a call open
        long enough that the wait check needs fresh state (its completion may be pending)."""
        if st.pending_n >= TICK_FLUSH_RECORDS or now_ns - st.pending_since >= TICK_FLUSH_AGE_NS:
            return True
        if st.n == 0:  # new comm: its windows start at once
            return True
        if 0 < st.win_anchor <= now_ns - st.window_ns():
            return True
        if st.p2p and now_ns - st.p2p_win_start >= WINDOW_MIN_NS:
            return True
        since = now_ns - WAIT_REPORT_FRACTION * self.threshold_ns(st)
        open_coll = st.started > st.completed
        if open_coll.any() and int(st.t_in[open_coll].min()) <= since:
            return True
        return any(s > d and 0 < t <= since for s, d, t in st.p2p.values())

    def prune(self, now_ns: int) -> None:
        """Forget comms and nodes with no calls or heartbeats for `state_idle_s` (a job that
        ended, a comm destroyed), so state follows the live comms, not the run's history.
        A comm still in a wait is kept: its hang stays reported until it clears."""
        idle = self.settings.state_idle_s * 1e9
        for key in [k for k, st in self.comms.items() if now_ns - st.last_seen_ns >= idle and k not in self._waiting]:
            del self.comms[key]
            self._comm_reported.pop(key, None)
            self._dirty.discard(key)
        for key in [k for k, ts in self._node_seen.items() if now_ns - ts >= idle]:
            del self._node_seen[key]

    def comm_report(self, st: CommState, now_ns: int) -> dict:
        p50, _ = st.gap_quantiles()
        return {
            "type": "comm", "job": st.job, "ts_ns": int(now_ns), "comm": st.hex,
            "members": st.members(), "nodes": st.nodes(), "last_progress_ns": int(st.last_progress_ns),
            "gap_p50_ns": int(p50), "threshold_ns": int(self.threshold_ns(st)),
        }

    def wait_report(self, st: CommState, now_ns: int) -> dict | None:
        """Who is inside a call of this comm, since when, and who never entered it."""
        if st.n == 0:
            return None
        open_coll = st.started > st.completed
        if not open_coll.any() and not any(s > d for s, d, _ in st.p2p.values()):
            return None
        thr = self.threshold_ns(st)
        min_age = WAIT_REPORT_FRACTION * thr
        inside: list[list[int]] = []
        missing: set[int] = set()
        seq, op, p2p_seq = -1, "p2p", -1
        known = st.rank_of >= 0
        coll_in = known & open_coll & (st.t_in > 0)
        if coll_in.any():
            k = int(st.started[coll_in].max())
            waiting = coll_in & (st.started == k)
            if now_ns - int(st.t_in[waiting].min()) >= min_age:
                seq = k
                op = wire.op_name(int(st.ops[k % st.slots])) if st.tag[k % st.slots] == k else "collective"
                for c in np.flatnonzero(waiting).tolist():
                    inside.append([int(st.rank_of[c]), int(st.t_in[c]), -1])
                missing.update(int(r) for r in st.rank_of[known & ~waiting & (st.completed < k)].tolist())
        for (c, peer, is_recv), (s, done, since) in st.p2p.items():
            if s <= done or since <= 0 or now_ns - since < min_age or c >= st.n:
                continue
            g = int(st.rank_of[c])
            pg = int(st.rank_of[peer]) if 0 <= peer < st.n else -1
            if g < 0:
                continue
            inside.append([g, int(since), pg])
            other = st.p2p.get((peer, c, 1 - is_recv))
            if pg >= 0 and (other is None or other[0] < s):
                missing.add(pg)
                if seq < 0:  # name what the missing peer never entered
                    op, p2p_seq = ("Send" if is_recv else "Recv"), s
        if not inside:
            return None
        inside_ranks = {r for r, _, _ in inside}
        missing -= inside_ranks
        unknown = int(st.n - known.sum())
        return {
            "type": "wait", "job": st.job, "ts_ns": int(now_ns), "comm": st.hex, "seq": seq, "op": op,
            "p2p_seq": p2p_seq, "since_ns": min(t for _, t, _ in inside), "threshold_ns": int(thr),
            "inside": sorted(inside), "missing": sorted(missing), "unknown": unknown,
            "members": int(known.sum()), "nodes": st.nodes(),
        }
