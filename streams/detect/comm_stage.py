"""Stage 1: one `CommState` per (job, comm); calls and heartbeats in, compact reports out.

Reports (JSON-able dicts, each with "type", "job", "ts_ns" = the job's event time):

- `window` / `p2p_window`: per-member timing features of a comm (`windows.py`).
- `wait`: the comm's blocked instances, repeated at every tick while they last (from
  `WAIT_REPORT_S` of waiting on): `instances` = [{`seq`, `op`, `p2p`, `since_ns` (when the
  wait began: its first entry seen, or the first device start of a member seen queued
  before, whichever is later; a host enqueues ahead of its device), `entered`
  (ranks inside it), `missing` (members that never entered it), `t_in` (when each entered
  it, on its own clock, 0 unknown), `queued` (entered members known only to have enqueued
  it while another member is known inside it on its device: their devices have not reached
  it), `peer_done` (a P2P call whose other side completed its own: the transfer is over
  for the peer, this side's completion never came)}]. A collective comm has at
  most one blocked instance: the first that no member completed (`d + 1`); the calls a
  rank queued behind it are not listed (they are symptoms). A P2P channel is blocked when
  a posted send or recv does not complete; its instance has the two ranks as members.
- `wait_clear`: the comm's wait is over.
- `comm` (every `COMM_REPORT_NS` per comm): `members`, `nodes`, `size`, `unknown` (members
  never seen), `device` (a call of it ran on a device: GPU_TIMED or ENQUEUED records, NCCL), `d` / `s` (highest collective completed / entered by any member), `d_ns`
  (when `d` last advanced, on the job's clock), `seen_d_ns` (when a member's probe last saw a
  newer collective complete: calls given up on, COMPLETION_LOST, count in `d`, not here),
  `gap_p99_ns` (the comm's cadence: how long its members normally go without progress),
  `last_ns` (when any member last made progress), `seen_ns` (the event time of the newest
  message about the comm: heartbeats come every period, so older means its input is
  behind), `active` (it carried a call), `done` (a call of it ever completed),
  `quiet` ([[rank, since_ns]]: members without progress for `QUIET_NS` or more),
  `stuck` ([[rank, completed, since_ns]]: members whose completion counter stopped while
  their peers completed later instances, or whose probe gives up (COMPLETION_LOST) on
  instances its peers saw complete, its own last seen `completed` since `since_ns`: a stuck
  completion path), `exited`, `left`.
- `node`: a node's heartbeat (`node`, `ranks`), at most once per heartbeat period.

Time: every method takes the job's own now (`now_of(job)`), never another job's.
"""

from __future__ import annotations

import struct
from typing import Callable

import numpy as np

from commwatch import wire
from commwatch.decode import CallBatch
from commwatch.settings import Settings
from commwatch.streams.detect.comm_state import CommState
from commwatch.streams.detect.node_lag import NodeLags
from commwatch.streams.detect.windows import p2p_reports, window_report

_RANK = struct.Struct("<i")  # a batch's first record's rank (all its records are of one node)
_RANK_AT = wire.BATCH_HEADER_SIZE + wire.RECORD_DTYPE.fields["rank"][1]
TICK_NS = 500_000_000
FLUSH_RECORDS = 8192
TICK_FLUSH_RECORDS = 1024  # at a tick, a comm's pending records are applied once this many...
TICK_FLUSH_AGE_NS = 2_000_000_000  # ...or the oldest this old, or a window or wait may be due
MAX_PENDING_HB = 256  # heartbeats kept waiting for a flush at most (a bound on memory)
HB_WAIT_NS = 1_000_000_000  # a heartbeat behind flowing records waits for their flush at most this long
HB_FLUSH_GAP_NS = 250_000_000  # a heartbeat applies pending records when a report may be due, this often at most
COMM_REPORT_NS = 1_000_000_000
PRUNE_NS = 10_000_000_000
WAIT_REPORT_NS = 1_000_000_000  # a blocked instance is reported once waited in this long
P2P_WINDOW_NS = 1_000_000_000
P2P_LAG_NS = 500_000_000
QUIET_NS = 1_000_000_000  # a member without progress this long is listed as quiet
IMPLIED_DONE = True  # ... but not one inside a call its peers completed, since it entered (a drill turns it off)
QUEUED_NOT_RUNNING = True  # a call only queued on its host, the job's probe writing device entries, is not running (`wait_report`)
STUCK_NS = 5_000_000_000  # a completion counter stopped this long behind its peers is stuck ...
STUCK_BEHIND_NS = 2_000_000_000  # ... once behind them this long (two heartbeats: not a report a moment late)


def _lag_key(d) -> tuple | None:
    """Whose clock a message's stamp is: (job, node) of a heartbeat, (job, first rank) of a
    call batch (a batch holds one node's calls)."""
    if type(d) is CallBatch:
        return (d.job, _RANK.unpack_from(d.value, _RANK_AT)[0]) if d.count else None
    if isinstance(d, dict) and "node" in d and "job" in d:
        return d["job"], d["node"]
    return None


class CommStage:
    """Stage 1 over many (job, comm): `feed` calls and heartbeats, `tick` for time passing.

    >>> from commwatch.settings import Settings
    >>> stage = CommStage(Settings.load(env={}))
    >>> stage.tick(lambda job: 10**18)
    []
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.comms: dict[tuple[str, int], CommState] = {}
        self._node_seen: dict[tuple[str, str], int] = {}
        self._node_lags = NodeLags()
        self._rank_node: dict[str, dict[int, str]] = {}  # job -> rank -> node (from heartbeats)
        self._waiting: set[tuple[str, int]] = set()
        self._comm_reported: dict[tuple[str, int], int] = {}
        self._dirty: set[tuple[str, int]] = set()
        self._job_tick: dict[str, int] = {}
        self._last_prune: dict[str, int] = {}
        self.by_job: dict[str, set[tuple[str, int]]] = {}

    def state(self, job: str, comm: int) -> CommState:
        st = self.comms.get((job, comm))
        if st is None:
            st = self.comms[(job, comm)] = CommState(job, comm, self.settings.window_instances)
            self.by_job.setdefault(job, set()).add((job, comm))
        return st

    # ------------------------------------------------------------------------------
    def feed(self, msg, decoded, now_ns: int, at_ns: int | None = None) -> list[dict]:
        """One message at the job's `now_ns`; what it says happened at its own event time
        (`at_ns`: its timestamp on the job's clock, `learn_lags`; by default its timestamp;
        never later than now): that is when its ranks made progress."""
        stamp = min(msg.ts_ns if at_ns is None else at_ns, now_ns)
        if isinstance(decoded, CallBatch):
            return self.feed_calls(decoded, now_ns, stamp)
        if isinstance(decoded, dict) and "ranks" in decoded and "node" in decoded:
            return self.feed_progress(decoded, now_ns, stamp)
        return []

    def feed_many(self, msgs: list, decoded: list, now_ns: int, at: list[int] | None = None) -> list[dict]:
        """`feed` over one job's messages of a poll, in order (`at`: their stamps on the job's
        clock, from `learn_lags`)."""
        out: list[dict] = []
        for i, (msg, d) in enumerate(zip(msgs, decoded)):
            t = msg.ts_ns if at is None else at[i]
            stamp = t if t < now_ns else now_ns
            if type(d) is CallBatch:
                got = self.feed_calls(d, now_ns, stamp)
            else:
                got = self.feed(msg, d, now_ns, stamp)
            if got:
                out.extend(got)
        return out

    def feed_calls(self, batch: CallBatch, now_ns: int, stamp: int | None = None) -> list[dict]:
        """Buffer the batch (`stamp`: its time on the job's clock); a comm's batches are folded in together (at a tick, or once
        `FLUSH_RECORDS` are pending), so the per-batch numpy overhead is paid rarely."""
        key = (batch.job, batch.comm)
        st = self.comms.get(key)
        if st is None:
            st = self.state(batch.job, batch.comm)
        if stamp is None:
            stamp = now_ns
        if stamp > st.last_seen_ns:
            st.last_seen_ns = stamp
        if not st.pending:
            st.pending_since = now_ns
            self._dirty.add(key)
        st.pending.append((batch.value, stamp, batch.count))
        n = st.pending_n = st.pending_n + batch.count
        if n >= FLUSH_RECORDS or (not st.p2p_only and n >= st.rows * st.n // 2):
            # the second: the pending calls may span half the comm's instance ring (a backlog
            # read partition by partition brings seconds of one comm before its job ticks)
            return self._flush(st, now_ns)
        return []

    def _flush(self, st: CommState, now_ns: int) -> list[dict]:
        self._dirty.discard((st.job, st.comm))
        if not st.pending:
            return []
        st.flushed_ns = now_ns
        h = wire.BATCH_HEADER_SIZE
        recs = np.frombuffer(b"".join([v[h:] for v, _, _ in st.pending]), dtype=wire.RECORD_DTYPE)
        ts = np.repeat(np.fromiter((t for _, t, _ in st.pending), np.int64, len(st.pending)),
                       np.fromiter((n for _, _, n in st.pending), np.int64, len(st.pending)))
        st.pending, st.pending_n = [], 0
        closed = st.apply_records(recs, ts)
        for hb, stamp in st.pending_hb:
            st.apply_progress(hb, stamp)
        st.pending_hb = []
        out: list[dict] = []
        for a, b in closed:
            rep = window_report(st, a, b, now_ns)
            if rep is not None:
                out.append(rep)
        if st.p2p and self._p2p_due(st, now_ns):
            out.extend(p2p_reports(st, now_ns, P2P_WINDOW_NS, P2P_LAG_NS))
        return out

    def feed_progress(self, hb: dict, now_ns: int, stamp: int | None = None) -> list[dict]:
        job, node = hb["job"], hb["node"]
        st = self.state(job, int(hb["comm"], 16))
        # when the node was heard from and its ranks made progress: its heartbeat's own time
        # (on the job's clock, `learn_lags`: else a node whose clock is seconds behind seems
        # silent, or all the others do when one runs ahead), not the job's now (a poll read at
        # once moves the job's clock to its newest message first: a node whose heartbeat came
        # early in it would seem seconds younger than the others, and they lost)
        at = stamp = now_ns if stamp is None else stamp
        st.last_seen_ns = max(st.last_seen_ns, at)
        out: list[dict] = []
        if st.pending and len(st.pending_hb) < MAX_PENDING_HB and (
                now_ns - st.flushed_ns < HB_FLUSH_GAP_NS or not self._report_due(st, now_ns)):
            # records first (they are older): the heartbeat waits for the comm's next flush
            st.pending_hb.append((hb, stamp))
        else:
            out = self._flush(st, now_ns) if st.pending else []
            st.apply_progress(hb, stamp)
        last = self._node_seen.get((job, node), 0)
        if at - last >= self.settings.heartbeat_period_s * 1e9 * 0.9:
            self._node_seen[(job, node)] = at
            out.append({"type": "node", "job": job, "ts_ns": int(at), "node": node,
                        "ranks": sorted(r["rank"] for r in hb["ranks"])})
        return out

    def learn_lags(self, msgs: list, decoded: list, ref_ns: int, learn: list[bool] | None = None) -> list[int]:
        """How far each node's clock runs behind its job's, from messages received at
        `ref_ns` (a poll; replay: one message at its time), learnt before they are fed
        (`node_lag.py`): heartbeats per node, call batches per first rank; only from the
        messages `learn` marks (live: those of partitions read to their end in this poll; a
        backlog read partition by partition says how old its messages are, not how far
        their clocks are off). Returns each message's stamp on its job's clock (its own,
        moved on by its node's skew): what they are fed with (`feed_many`), and what the
        job's clock and the runs of a poll are cut by."""
        keys = [_lag_key(d) for d in decoded]
        observe = self._node_lags.observe
        for i, (m, k) in enumerate(zip(msgs, keys)):
            if k is None:
                continue
            if type(k[1]) is str:  # a heartbeat: the ranks it names run on its node's clock
                nodes = self._rank_node.get(k[0])
                if nodes is None:
                    nodes = self._rank_node[k[0]] = {}
                for r in decoded[i]["ranks"]:
                    nodes[r["rank"]] = k[1]
            if learn is None or learn[i]:
                observe(k[0], k[1], ref_ns - m.ts_ns, ref_ns)
        return [m.ts_ns + self._skew(*k) if k is not None else m.ts_ns for m, k in zip(msgs, keys)]

    def _skew(self, job: str, key: str | int) -> int:
        """The skew of a node, or of a rank: its own when its batches were learnt from, else
        its node's (live, batches are not learnt from: `streams/app.py`)."""
        lags = self._node_lags
        if type(key) is int and not lags.knows(job, key):
            key = self._rank_node.get(job, {}).get(key, key)
        return lags.skew(job, key)

    def established(self, job: str, ref_ns: int) -> bool:
        """Whether a node clock set ahead is moved back rather than followed (`node_lag.py`)."""
        return self._node_lags.established(job, ref_ns)

    def skew_of(self, job: str, decoded: dict) -> int:
        """The skew of a job message's sender (`cw.topology.v1`, `cw.steps.v1`, `cw.hw.v1`): its
        node's, else its rank's."""
        key = decoded.get("node")
        if key is None:
            key = decoded.get("rank")
        return self._skew(job, key) if isinstance(key, (str, int)) else 0

    def learn_one(self, msg, batch: CallBatch, ref_ns: int) -> int:
        """`learn_lags` of one call batch (replay's path)."""
        if not batch.count:
            return msg.ts_ns
        rank = _RANK.unpack_from(batch.value, _RANK_AT)[0]  # `_lag_key` of a batch
        return msg.ts_ns + self._node_lags.observe(batch.job, rank, ref_ns - msg.ts_ns, ref_ns)

    # ------------------------------------------------------------------------------
    def tick(self, now_of: Callable[[str], int]) -> list[dict]:
        """Time passing for every job, each on its own clock (`now_of(job)`)."""
        out: list[dict] = []
        for job in list(self.by_job):
            out.extend(self.tick_job(job, now_of(job)))
        return out

    def next_tick_ns(self, job: str) -> int:
        """The job's time from which `tick_job` does anything again."""
        return self._job_tick.get(job, 0) + TICK_NS

    def tick_job(self, job: str, now: int) -> list[dict]:
        """Time passing for one job's comms (at most once per `TICK_NS` of its time)."""
        if now - self._job_tick.get(job, 0) < TICK_NS:
            return []
        self._job_tick[job] = now
        out: list[dict] = []
        keys = sorted(self.by_job.get(job, ()))
        for key in keys:
            st = self.comms[key]
            if key in self._dirty and self._due(st, now):
                out.extend(self._flush(st, now))
        for key in keys:
            st = self.comms[key]
            if now - self._comm_reported.get(key, 0) >= COMM_REPORT_NS:
                self._comm_reported[key] = now
                out.append(self.comm_report(st, now))
            rep = self.wait_report(st, now)
            if rep is not None:
                self._waiting.add(key)
                out.append(rep)
            elif key in self._waiting:
                self._waiting.discard(key)
                out.append({"type": "wait_clear", "job": st.job, "ts_ns": int(now), "comm": st.hex})
        last = self._last_prune.setdefault(job, now)
        if now - last >= PRUNE_NS:
            self.prune(job, now)
        return out

    def _due(self, st: CommState, now_ns: int) -> bool:
        """Whether a comm's pending records are applied at this tick: a new comm, a heartbeat
        waiting behind them for `HB_WAIT_NS` (while records flow they carry its progress; a
        heartbeat of a comm with nothing pending is applied on arrival), or a report that
        may be due (`_report_due`)."""
        return st.n == 0 or bool(st.pending_hb and now_ns - st.pending_hb[0][1] >= HB_WAIT_NS) or self._report_due(
            st, now_ns)

    def _report_due(self, st: CommState, now_ns: int) -> bool:
        """Enough records pending, the oldest old enough, a window that may close, a P2P
        window or a wait that may be due."""
        if st.pending_n >= TICK_FLUSH_RECORDS or now_ns - st.pending_since >= TICK_FLUSH_AGE_NS:
            return True
        if 0 < st.win_anchor <= now_ns - st.window_ns() * 1.0:
            return True
        if st.p2p and self._p2p_due(st, now_ns):
            return True
        if st.open_since and now_ns - st.open_since >= WAIT_REPORT_NS // 2:
            return True
        return any(s > d and 0 < t <= now_ns - WAIT_REPORT_NS for s, d, t, _ in st.p2p.values())

    @staticmethod
    def _p2p_due(st: CommState, now_ns: int) -> bool:
        """P2P windows are cut at multiples of `P2P_WINDOW_NS` of event time, the same instants
        for every comm (pipelines are bursty: comms cut alike see the same share of each
        burst, so their ranks compare fairly), and reported `P2P_LAG_NS` after they end."""
        return bool(st.p2p_iv or st.p2p_untimed) and (
            st.p2p_win_start == 0 or st.p2p_win_start + P2P_WINDOW_NS + P2P_LAG_NS <= now_ns)

    def prune(self, job: str, now_ns: int) -> None:
        """Forget a job's comms and nodes with no calls or heartbeats for `state_idle_s`.
        A comm still in a wait is kept: its hang stays reported until it clears."""
        self._last_prune[job] = now_ns
        idle = self.settings.state_idle_s * 1e9
        keys = self.by_job.get(job, set())
        for key in [k for k in keys if now_ns - self.comms[k].last_seen_ns >= idle and k not in self._waiting]:
            self._drop(key)
        for key in [k for k, ts in self._node_seen.items() if k[0] == job and now_ns - ts >= idle]:
            del self._node_seen[key]
        self._node_lags.keep(job, {k[1] for k in self._node_seen if k[0] == job}
                             | {r for k in self.by_job.get(job, ()) for r in self.comms[k].rank_of.tolist()})
        if not keys:
            self.forget_job(job)

    def let_go(self, keys) -> None:
        """Forget these comms at once, saying nothing (their input went to another worker)."""
        for key in keys:
            if key in self.comms:
                self._drop(key)

    def _drop(self, key: tuple[str, int]) -> None:
        del self.comms[key]
        self._comm_reported.pop(key, None)
        self._dirty.discard(key)
        self._waiting.discard(key)
        keys = self.by_job.get(key[0])
        if keys is not None:
            keys.discard(key)

    def forget_job(self, job: str) -> None:
        for key in list(self.by_job.pop(job, ())):
            self.comms.pop(key, None)
            self._comm_reported.pop(key, None)
            self._dirty.discard(key)
            self._waiting.discard(key)
        for key in [k for k in self._node_seen if k[0] == job]:
            del self._node_seen[key]
        self._node_lags.forget(job)
        self._rank_node.pop(job, None)
        self._job_tick.pop(job, None)
        self._last_prune.pop(job, None)

    # ------------------------------------------------------------------------------
    def comm_report(self, st: CommState, now_ns: int) -> dict:
        _, p99 = st.gap_quantiles()
        ranks = st.rank_of
        since = np.where(st.adv_ns > 0, st.adv_ns, st.first_ns)
        if IMPLIED_DONE and not st.p2p_only:
            # a member inside a call its peers completed completed it too (a collective completes
            # on every member or on none): its record is on the way. The islands generator's site
            # leaders, 20 s in a WAN all-reduce whose first completions came from other nodes,
            # were named hung ("silent" since they entered it) by the broadcast their sites
            # waited in, 0.3 s after they left it
            # (observed completions only: a call given up on, COMPLETION_LOST, completed nowhere)
            implied = (st.completed < st.started) & (st.started <= st.seen_d)
            since = np.where(implied, np.maximum(since, st.seen_d_ns), since)
        quiet = np.flatnonzero(now_ns - since >= QUIET_NS)
        stuck = np.flatnonzero(st.ever_done & (st.completed < st.d_max) & ~st.exited
                               & (now_ns - st.done_adv_ns >= STUCK_NS) & (st.done_adv_ns < st.d_adv_ns))
        # and behind its peers for a while (in a job whose completions come 30 s apart, a node
        # whose report of the latest one is a moment late is not stuck)
        stuck = [i for i in stuck.tolist() if now_ns - (st.behind_ns[i] or st.d_adv_ns) >= STUCK_BEHIND_NS]
        # or it gives up on the completions its peers see (COMPLETION_LOST counts in `completed`:
        # not a wait; but a collective completes on every member or none, so its own never come)
        lost = np.flatnonzero(st.ever_done & ~st.exited & (st.completed > st.seen_done) & (st.seen_done < st.seen_d)
                              & (now_ns - st.seen_adv_ns >= STUCK_NS) & (st.seen_adv_ns < st.seen_d_ns)).tolist()
        stuck_rows = [[int(ranks[i]), int(st.completed[i]), int(st.done_adv_ns[i])] for i in stuck]
        stuck_rows += [[int(ranks[i]), int(st.seen_done[i]), int(st.seen_adv_ns[i])] for i in lost if i not in stuck]
        return {
            "type": "comm", "job": st.job, "ts_ns": int(now_ns), "comm": st.hex,
            "members": ranks.tolist(), "nodes": st.nodes(), "size": int(st.size), "unknown": st.unknown(),
            "d": int(st.d_max), "d_ns": int(st.d_adv_ns), "seen_d_ns": int(st.seen_d_ns),
            "s": int(st.started.max()) if st.n else -1,
            "p2p_only": st.p2p_only, "device": st.device,
            "active": bool((st.n and int(st.started.max()) >= 0) or st.p2p),
            "done": bool(st.d_max >= 0 or any(c[1] >= 0 for c in st.p2p.values())),
            "gap_p99_ns": int(p99), "last_ns": int(st.adv_ns.max()) if st.n else 0, "seen_ns": int(st.last_seen_ns),
            "quiet": [[int(ranks[i]), int(since[i])] for i in quiet.tolist()],
            "stuck": stuck_rows,
            "exited": ranks[st.exited].tolist(), "left": ranks[st.left].tolist(),
        }

    def _dev_entries(self, job: str) -> bool:
        """Whether the job's probe writes device entries (a comm of it has some): asked only
        for a blocked instance, not at every comm's tick."""
        return QUEUED_NOT_RUNNING and any(self.comms[key].dev_entry.any() for key in self.by_job.get(job, ()))

    def wait_report(self, st: CommState, now_ns: int) -> dict | None:
        """The comm's blocked instances (see the module docstring), None when there are none."""
        if st.n == 0:
            return None
        ranks = st.rank_of
        instances = []
        # where the job's probe writes device entries (`_dev_entries`: a call whose kernel
        # started and runs on is written again with its GPU start, `nccl-patch`): a call only
        # queued on the host is not running, and an instance is stuck in its transport from when all its members
        # got inside on their devices (`inside_ns`), not from their hosts' enqueues. The job
        # model's rank 0 checkpointing alone for 4.6 s (a 5 s threshold): its pipeline
        # pair's transfer and its next stage's TP all-reduce, queued by their hosts as it
        # began, were each a P0 comm_hang 5.1 s later, as rank 0 came back
        if not st.p2p_only and st.open_since:
            k = st.d_max + 1
            since = max(st.d_adv_ns, st.open_since, st.device_start(k))
            if now_ns - since >= WAIT_REPORT_NS:
                entered = st.started >= k
                inside = np.flatnonzero(entered)
                instances.append({"seq": int(k), "op": st.op_of(k), "p2p": False, "since_ns": int(since),
                                  "inside_ns": int(now_ns if st.not_running(k, inside) and self._dev_entries(st.job)
                                                   else since),
                                  "entered": ranks[entered].tolist(), "missing": ranks[~entered].tolist(),
                                  "t_in": st.entered_at(k, inside), "queued": ranks[st.queued_in(k, inside)].tolist()})
        seen: set[tuple[int, int, int]] = set()
        for (a, b, is_recv), (s, d, since, t_in) in st.p2p.items():
            if s <= d or since <= 0 or now_ns - since < WAIT_REPORT_NS or (a, b, d + 1) in seen:
                continue
            k = d + 1
            other = st.p2p.get((b, a, 1 - is_recv))
            posted = other is not None and other[0] >= k and other[1] < k
            if posted:
                seen.add((b, a, k))
            # the op the waited-for side never entered (or, both posted, this side's)
            op = ("Recv" if is_recv else "Send") if posted else ("Send" if is_recv else "Recv")
            queued = []
            inside = since
            if posted:  # one side inside on its device, the other only queued its call
                ra = st.p2p_real.get((a, b, is_recv), -1) >= k
                rb = st.p2p_real.get((b, a, 1 - is_recv), -1) >= k
                queued = [int(ranks[b])] if ra and not rb else [int(ranks[a])] if rb and not ra else []
                if ra and rb:  # both inside on their devices: the transfer can run since the later got there
                    inside = max(since, st.p2p_real_ns.get((a, b, is_recv), 0),
                                 st.p2p_real_ns.get((b, a, 1 - is_recv), 0))
                elif not st.host_done[a] and not st.host_done[b] and self._dev_entries(st.job):
                    inside = now_ns  # a side only queued on its host: not running yet
            received = other is not None and other[1] >= k  # the other side completed its call k
            instances.append({"seq": int(k), "op": op, "p2p": True,
                              "since_ns": int(since), "inside_ns": int(inside),
                              "entered": [int(ranks[a])] + ([int(ranks[b])] if posted else []),
                              "missing": [] if posted or received else [int(ranks[b])],
                              "t_in": [int(t_in)] + ([int(other[3])] if posted else []), "queued": queued,
                              "peer_done": received})
        instances = [i for i in instances if i["entered"]]
        if not instances:
            return None
        return {"type": "wait", "job": st.job, "ts_ns": int(now_ns), "comm": st.hex, "instances": instances,
                "members": int(st.n), "unknown": st.unknown(), "nodes": st.nodes()}
