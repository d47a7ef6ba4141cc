"""Progress heartbeats (`cw.progress.v1`): per node agent, per communicator of its ranks.

State is kept per (rank, communicator kind) for collectives and per (rank, direction) for
PP send/recv, updated from the calls' start and end events up to each heartbeat time.
A whole beat (every message, or every capture line) is one %-template, made once per
pattern of which fields are present and cached, so a beat costs one format call: the bytes
equal `commwatch.messages.dumps` of the contract's dict (a unit test decodes and re-dumps
every message).
"""

from __future__ import annotations

import numpy as np

from commwatch import topics, wire
from commwatch.capture import Message
from commwatch.producers.simulate import payloads
from commwatch.producers.simulate.clock import NodeClocks
from commwatch.producers.simulate.engine import Calls
from commwatch.producers.simulate.layout import Layout
from commwatch.producers.simulate.outbox import Outbox
from commwatch.producers.simulate.spec import JobSpec

P2P_DIRS = ((wire.OP_SEND, 1, "send"), (wire.OP_SEND, -1, "send"), (wire.OP_RECV, -1, "recv"),
            (wire.OP_RECV, 1, "recv"))  # (op, peer stage - own stage, name); index = direction
T_START, T_END = ',"t_last_start_ns":', ',"t_last_end_ns":'


class Progress:
    def __init__(self, spec: JobSpec, lay: Layout, clock: NodeClocks, lost_at: np.ndarray, comm_keys: list[str],
                 node_comms: list, outbox: Outbox):
        self.spec, self.lay, self.clock, self.lost_at, self.outbox = spec, lay, clock, lost_at, outbox
        self.stage = lay.coords["pp"]
        R, S = lay.world_size, max(len(lay.kinds), 1)
        self.S = S
        self.started = np.full(R * S, -1, dtype=np.int64)
        self.completed = self.started.copy()
        self.last_start = np.full(R * S, -np.inf)
        self.last_end = self.last_start.copy()
        self.p2p_started = np.full(R * 4, -1, dtype=np.int64)
        self.p2p_completed = self.p2p_started.copy()
        self.ev_start: list[tuple[np.ndarray, ...]] = []
        self.ev_end: list[tuple[np.ndarray, ...]] = []
        self._templates(comm_keys, node_comms)

    def _templates(self, comm_keys: list[str], node_comms: list) -> None:
        """The pieces of a %-template per heartbeat message (node, comm), in node order, and
        its arguments: positions in the beat's value vector ``V`` = node times, then per rank
        entry started, completed, t_last_start_ns, t_last_end_ns, then per p2p entry started,
        completed. Capture lines carry the time twice (line and value)."""
        spec, lay = self.spec, self.lay
        S = self.S
        job = _esc(payloads.jstr(spec.job))
        lines = self.outbox.lines
        prefixes = self.outbox.prefixes(topics.PROGRESS)
        self.beat_cache: dict[tuple[bytes, bytes], tuple] = {}
        self.pieces: dict[int, list[str]] = {}
        self.close = "]}}\n" if lines else "]}"
        self.msg_node, self.msg_key, self.msg_open, ranks, sizes, kinds = [], [], [], [], [], []
        kind_of = {c.index: lay.kinds.index(c.kind) for c in lay.comms}
        for node, entries in enumerate(node_comms):
            name = lay.node_names[node]
            for cidx, members in entries:
                key = comm_keys[cidx]
                head = f'{{"v":1,"job":{job},"node":"{name}","ts_ns":%d,"comm":"{lay.comms[cidx].hex}","ranks":['
                self.msg_open.append(_esc(prefixes[key]) + '%d,"value":' + head if lines else head)
                self.msg_node.append(node)
                self.msg_key.append(key)
                ranks += members
                sizes.append(len(members))
                kinds.append(kind_of[cidx])
        n_msgs = len(sizes)
        sizes_a = np.array(sizes, dtype=np.int64)
        item_rank = np.array(ranks, dtype=np.int64)
        item_kind = np.repeat(np.array(kinds, dtype=np.int64), sizes_a)
        n_items = len(item_rank)
        self.slots = item_rank * S + item_kind
        self.slot_node = lay.node_of_rank[item_rank]
        self.msg_first = np.cumsum(sizes_a) - sizes_a
        self.msg_items = list(zip(self.msg_first.tolist(), (self.msg_first + sizes_a).tolist()))
        self.msg_node_arr = np.array(self.msg_node, dtype=np.int64)
        self.item_pre = [f'{{"rank":{r},"started":%d,"completed":%d' for r in ranks]
        # p2p entries of PP comm members, per rank entry in direction order
        pp_kind = lay.kinds.index("pp") if "pp" in lay.kinds else -1
        pp_items = np.flatnonzero(item_kind == pp_kind)
        stage = self.stage[item_rank[pp_items]]
        d = np.array([dd for _, dd, _ in P2P_DIRS])
        valid = (stage[:, None] + d >= 0) & (stage[:, None] + d < spec.pp)
        row, j = np.nonzero(valid)
        p2p_item = pp_items[row]
        self.p2p_slots = item_rank[p2p_item] * 4 + j
        names = [op for _, _, op in P2P_DIRS]
        entries = [f'{{"peer":{p},"op":"{names[k]}","started":%d,"completed":%d}}'
                   for p, k in zip((stage[row] + d[j]).tolist(), j.tolist())]
        self.item_p2p = [""] * n_items
        per_item = np.bincount(row, minlength=len(pp_items)).tolist()
        lo = 0
        for i, n in zip(pp_items.tolist(), per_item):
            self.item_p2p[i] = ',"p2p":[' + ",".join(entries[lo:lo + n]) + "]"
            lo += n
        # argument positions in V, ordered by (item, field) (32 keys an item): the node
        # time(s) sort just before the message's first item
        n_nodes, n_p2p = lay.n_nodes, len(p2p_item)
        base = n_nodes + np.arange(4) * n_items
        n_ts = 2 if lines else 1
        keys = [np.repeat(self.msg_first * 32 - 16, n_ts) + np.tile(np.arange(n_ts), n_msgs),
                (np.arange(n_items)[:, None] * 32 + np.arange(4)).ravel(),
                (p2p_item[:, None] * 32 + 4 + 2 * j[:, None] + np.arange(2)).ravel()]
        vals = [np.repeat(self.msg_node_arr, n_ts),
                (base + np.arange(n_items)[:, None]).ravel(),
                (n_nodes + 4 * n_items + np.arange(n_p2p)[:, None] + np.array([0, n_p2p])).ravel()]
        key, val = np.concatenate(keys), np.concatenate(vals)
        self.arg_index = val[np.argsort(key, kind="stable")]
        self.arg_end = np.cumsum(n_ts + 4 * sizes_a + 2 * np.bincount(np.repeat(np.arange(n_msgs), sizes_a)[p2p_item],
                                                                        minlength=n_msgs)).tolist()

    def track(self, c: Calls) -> None:
        """Queue the start/end events of issued calls `c`."""
        p2p = (c.op == wire.OP_SEND) | (c.op == wire.OP_RECV)
        coll = ~p2p
        S = self.S
        ck = c.rank[coll] * S + c.kind[coll]
        if p2p.any():
            r = c.rank[p2p]
            d = c.peer[p2p] - self.stage[r]
            send = c.op[p2p] == wire.OP_SEND
            direction = np.where(send, np.where(d > 0, 0, 1), np.where(d < 0, 2, 3))
            pk = r * 4 + direction
        else:
            pk = np.zeros(0, dtype=np.int64)
        self.ev_start.append(_events(c.t0[coll], ck, c.seq[coll], c.t0[p2p], pk, c.seq[p2p]))
        fin = np.isfinite(c.t1)
        self.ev_end.append(_events(c.t1[coll & fin], ck[fin[coll]], c.seq[coll & fin],
                                   c.t1[p2p & fin], pk[fin[p2p]], c.seq[p2p & fin]))

    @staticmethod
    def _apply(events: list, h: float, seq_c: np.ndarray, last: np.ndarray, seq_p: np.ndarray) -> list:
        """Fold the events at or before `h` into the state; returns those still to come."""
        later = []
        for ev in events:
            t, k, s, tp, kp, sp, t_min, t_max = ev
            if t_min > h:
                later.append(ev)
                continue
            if t_max > h:
                m, mp = t <= h, tp <= h
                later.append(_events(t[~m], k[~m], s[~m], tp[~mp], kp[~mp], sp[~mp]))
                t, k, s, tp, kp, sp = t[m], k[m], s[m], tp[mp], kp[mp], sp[mp]
            np.maximum.at(seq_c, k, s)
            np.maximum.at(last, k, t)
            np.maximum.at(seq_p, kp, sp)
        return later

    def beat(self, h: float) -> None:
        """The heartbeats of every live node agent at true time `h`."""
        self.ev_start = self._apply(self.ev_start, h, self.started, self.last_start, self.p2p_started)
        self.ev_end = self._apply(self.ev_end, h, self.completed, self.last_end, self.p2p_completed)
        alive = h < self.lost_at[self.msg_node_arr]
        if not alive.any():
            return
        sl = self.slots
        ls, le = self.last_start[sl], self.last_end[sl]
        has_s, has_e = np.isfinite(ls), np.isfinite(le)
        # per rank entry: which t_last_* it has (2: start, 1: end)
        codes = (has_s.astype(np.int8) << 1) | has_e.astype(np.int8)
        tmpl, arg_index, keys, nodes = self._beat_template(alive, codes)
        V = np.concatenate([self.clock(h, np.arange(self.lay.n_nodes)), self.started[sl], self.completed[sl],
                            self.clock(np.where(has_s, ls, 0.0), self.slot_node),
                            self.clock(np.where(has_e, le, 0.0), self.slot_node),
                            self.p2p_started[self.p2p_slots], self.p2p_completed[self.p2p_slots]])
        values = (tmpl % tuple(V[arg_index].tolist())).encode().split(b"\0")
        ts = V[nodes].tolist()
        box = self.outbox
        box.add(ts, values if box.lines else [Message(topics.PROGRESS, k, t, v) for k, t, v in zip(keys, ts, values)])
        box.by_topic[topics.PROGRESS] += len(values)

    def _beat_template(self, alive: np.ndarray, codes: np.ndarray) -> tuple:
        """One template for a whole beat (messages split by NUL, which JSON never holds), with
        its argument positions, keys and node per message; cached per pattern of live nodes
        and present ``t_last_*``, which rarely changes."""
        pattern = (alive.tobytes(), codes.tobytes())
        if pattern in self.beat_cache:
            return self.beat_cache[pattern]
        lo, hi = np.minimum.reduceat(codes, self.msg_first), np.maximum.reduceat(codes, self.msg_first)
        code = np.where(lo == hi, lo, -1).tolist()
        per_item = codes.tolist()
        live = np.flatnonzero(alive).tolist()
        tmpl = "\0".join(self._template(m, code[m] if code[m] >= 0 else per_item) for m in live)
        starts = [0] + self.arg_end[:-1]
        arg_index = np.concatenate([self.arg_index[starts[m]:self.arg_end[m]] for m in live])
        entry = (tmpl, arg_index, [self.msg_key[m] for m in live], self.msg_node_arr[live])
        if len(self.beat_cache) >= 4:
            self.beat_cache.clear()
        self.beat_cache[pattern] = entry
        return entry

    def _template(self, m: int, codes: int | list[int]) -> str:
        """Message `m`'s template; `codes` (one for all entries, or per rank entry) say which
        ``t_last_*`` appear: an absent one still takes its argument, printed as nothing."""
        lo, hi = self.msg_items[m]
        if isinstance(codes, int):
            body = ",".join(self._pieces(codes)[lo:hi])
        else:
            body = ",".join(self._pieces(codes[i])[i] for i in range(lo, hi))
        return self.msg_open[m] + body + self.close

    def _pieces(self, code: int) -> list[str]:
        """Every rank entry's template piece for one presence code."""
        pieces = self.pieces.get(code)
        if pieces is None:
            mid = (T_START + "%d" if code & 2 else "%.0s") + (T_END + "%d" if code & 1 else "%.0s")
            pieces = self.pieces[code] = [pre + mid + p2p + "}" for pre, p2p in zip(self.item_pre, self.item_p2p)]
        return pieces


def _events(t: np.ndarray, k: np.ndarray, s: np.ndarray, tp: np.ndarray, kp: np.ndarray, sp: np.ndarray) -> tuple:
    """Start or end events: collectives (time, rank*S + kind, seq), p2p (time, rank*4 + direction,
    seq), and the earliest and latest time."""
    return (t, k, s, tp, kp, sp, min(t.min(initial=np.inf), tp.min(initial=np.inf)),
            max(t.max(initial=-np.inf), tp.max(initial=-np.inf)))


def _esc(text: str) -> str:
    return text.replace("%", "%%")
