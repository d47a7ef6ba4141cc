"""Who waited on whom in point-to-point transfers (stage 1, one communicator).

SEND number k from a to b pairs with RECV number k on b from a (contract: P2P `seq`
counts calls per (comm, peer, op)). Both complete at nearly the same instant, so the
difference of their durations, each measured on its own rank's clock, is how much later
one side entered than the other: `recv_dur - send_dur = send_post - recv_entry`, free of
clock skew. The side that entered first waited on the other for that long (a rendezvous,
as for collectives).

Per window the waits form a wait-for graph; each rank's *blame* is the waiting it caused,
chained to the root: a rank that was late because it waited on another passes the blame
on (up to what it waited itself), so the stages after a slow stage (forward) and before it
(backward) are not blamed for the delay they only relayed.

>>> import numpy as np
>>> pw = P2PWaits()
>>> S = 10**9
>>> # rank 0 posts its sends 0.3 s late; rank 1 waits 0.3 s then relays, rank 2 waits on rank 1
>>> pw.add(np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]), np.array([0, 1, 0, 1]), np.zeros(4, np.int64),
...        np.array([S // 100, 31 * S // 100, S // 100, 31 * S // 100]))
>>> blame, own = pw.close(3)
>>> (blame / S).round(2).tolist(), (own / S).round(2).tolist()
([0.6, 0.0, 0.0], [0.0, 0.3, 0.3])
"""

from __future__ import annotations

import numpy as np

KEEP_WINDOWS = 3  # an unmatched half waits this many windows for its other half
MAX_PENDING = 1 << 16  # unmatched halves kept at most (newest first)
CHAIN_STEPS = 32  # wait-for chains followed at most this many hops


class P2PWaits:
    """Completed SEND/RECV halves in, per-window (blame, own) wait times per comm rank out."""

    def __init__(self) -> None:
        self._chunks: list[tuple[np.ndarray, ...]] = []
        # unmatched halves: sender, receiver, seq, is_recv, duration (ns), age (windows)
        self._left = tuple(np.zeros(0, np.int64) for _ in range(6))

    def add(self, cr: np.ndarray, peer: np.ndarray, is_recv: np.ndarray, seq: np.ndarray, dur: np.ndarray) -> None:
        """Completed P2P calls of comm ranks `cr` with `peer` (comm ranks), one array each."""
        if len(cr) == 0:
            return
        is_recv = is_recv.astype(np.int64)
        cr, peer = cr.astype(np.int64), peer.astype(np.int64)
        sender = np.where(is_recv == 1, peer, cr)
        receiver = np.where(is_recv == 1, cr, peer)
        self._chunks.append((sender, receiver, seq.astype(np.int64), is_recv, dur.astype(np.int64),
                             np.zeros(len(cr), np.int64)))

    def close(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Pair what has come in; returns per comm rank (blame, own) in ns for this window."""
        parts = [self._left, *self._chunks]
        self._chunks = []
        snd, rcv, seq, isr, dur, age = (np.concatenate([p[i] for p in parts]) for i in range(6))
        ok = (snd >= 0) & (snd < n) & (rcv >= 0) & (rcv < n) & (snd != rcv)
        snd, rcv, seq, isr, dur, age = snd[ok], rcv[ok], seq[ok], isr[ok], dur[ok], age[ok]
        order = np.lexsort((isr, seq, rcv, snd))
        snd, rcv, seq, isr, dur, age = snd[order], rcv[order], seq[order], isr[order], dur[order], age[order]
        same = (snd[1:] == snd[:-1]) & (rcv[1:] == rcv[:-1]) & (seq[1:] == seq[:-1])
        pair = np.flatnonzero(same & (isr[:-1] == 0) & (isr[1:] == 1))
        late = (dur[pair + 1] - dur[pair]).astype(np.float64)  # send post - recv entry, true time
        waiter = np.where(late > 0, rcv[pair], snd[pair])
        target = np.where(late > 0, snd[pair], rcv[pair])
        used = np.zeros(len(snd), bool)
        used[pair] = used[pair + 1] = True
        dup = np.zeros(len(snd), bool)
        dup[1:] = same & (isr[1:] == isr[:-1])  # the same half twice: keep one
        keep = ~used & ~dup & (age + 1 < KEEP_WINDOWS)
        left = [a[keep][-MAX_PENDING:] for a in (snd, rcv, seq, isr, dur, age + 1)]
        self._left = tuple(left)
        return chain_blame(n, waiter, target, np.abs(late))


def chain_blame(n: int, waiter: np.ndarray, target: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Blame per rank (waits caused, passed on to the root) and own wait per rank (ns).

    A rank forwards the blame it receives to those it waited on, in proportion to those
    waits, up to its own total wait; what it cannot forward stays with it.
    """
    own = np.bincount(waiter, weights=w, minlength=n)
    flow = np.bincount(target, weights=w, minlength=n)
    blame = np.zeros(n)
    cap = own.copy()
    share = np.divide(w, own[waiter], out=np.zeros_like(w), where=own[waiter] > 0)
    for _ in range(CHAIN_STEPS):
        fwd = np.minimum(flow, cap)
        cap -= fwd
        blame += flow - fwd
        if fwd.sum() <= 0:
            flow = np.zeros(n)
            break
        flow = np.bincount(target, weights=fwd[waiter] * share, minlength=n)
    return blame + flow, own
