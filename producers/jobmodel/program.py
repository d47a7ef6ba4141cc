"""What one rank's host thread enqueues in one training iteration (Megatron 1F1B).

An iteration is a list of `Op`s, the same every iteration, run in order by the host
thread (`MARK`, `HOST`, `SYNC` stay on the host; the rest go to the rank's GPU stream):

    MARK (hook.step: iteration boundary)   HOST (data loading)
    warm-up:   [recv fwd] F(mb) [send fwd]                  (PP - stage - 1 microbatches)
    steady:    F(mb) [send fwd + recv bwd] B(mb') [send bwd + recv fwd]
    cool-down: [recv bwd] B(mb') [send bwd]
    gradient reduce on dp (buckets: all-reduce, or reduce-scatter with a distributed
    optimizer), embedding all-reduce (first and last stage), grad-norm all-reduce (mp),
    optimizer compute, parameter all-gather on dp (distributed optimizer)
    SYNC (loss.item(): the host waits for its GPU)

F(mb) and B(mb) are `chunks` compute kernels (backward twice as long), each followed by
a TP all-reduce when TP > 1. Send/recv pairs that Megatron posts together
(`send_forward_recv_backward`) are one `P2P` op with two parts, as in a batched
isend/irecv: without that, a 1F1B pipeline of blocking sends would deadlock.

With a host-blocking backend (gloo), every communication op is wrapped in `SYNC`s: the
host waits for the GPU, then blocks in the call until it completes.

Each communication op has a `role` (`tp`, `p2p`, `grad`, `emb`, `mp`, `gather`, `loss`);
a probe that cannot see a role (PyTorch DDP's reducer calls NCCL from C++, so wrapping
`torch.distributed` misses the gradient all-reduce) leaves those calls out of its records.
"""

from __future__ import annotations

from dataclasses import dataclass

from commwatch import wire

COMPUTE, COLL, P2P, SYNC, HOST, MARK = range(6)
DEVICE_OPS = (COMPUTE, COLL, P2P)
FORWARD, BACKWARD, OPTIMIZER = 0, 1, 2
PHASE_NAMES = ("forward_ms", "backward_ms", "optimizer_ms")
SEND, RECV = 0, 1
ROLES = ("tp", "p2p", "grad", "emb", "mp", "gather", "loss")
ROLE_GROUP = {"tp": "tp", "p2p": "pp", "grad": "dp", "emb": "emb", "mp": "mp", "gather": "dp", "loss": "dp"}


@dataclass(frozen=True, slots=True)
class Part:
    """One side of a send/recv pair inside a `P2P` op: to or from `peer` (a pipeline stage)."""

    dir: int
    peer: int
    nbytes: int
    mb: int


@dataclass(frozen=True, slots=True)
class Op:
    code: int
    dur: float = 0.0  # COMPUTE: device seconds before slowness and jitter; HOST: host seconds
    role: str = ""  # COLL / P2P: which call this is (see ROLES)
    wire_op: int = 0  # COLL: wire op code
    nbytes: int = 0
    phase: int = -1  # FORWARD, BACKWARD, OPTIMIZER, or -1
    mb: int = -1
    parts: tuple[Part, ...] = ()


@dataclass(frozen=True)
class Workload:
    """The shape of an iteration. `step_s` is the healthy iteration time it aims at."""

    step_s: float = 1.0
    microbatches: int = 4
    chunks: int = 2
    dp_buckets: int = 2
    distributed_optimizer: bool = False
    loss_allreduce: bool = False
    tp_bytes: int = 16 << 20
    p2p_bytes: int = 8 << 20
    grad_bytes: int = 64 << 20

    def forward_s(self, pp: int) -> float:
        """Device time of one microbatch's forward; backward takes twice as long."""
        return 0.88 * self.step_s / (3 * (self.microbatches + pp - 1))


def iteration(stage: int, pp: int, tp: int, dp: int, work: Workload, blocking: bool = False) -> list[Op]:
    """The ops of one iteration of a rank at pipeline `stage`."""
    m = work.microbatches
    first, last = stage == 0, stage == pp - 1
    fwd = work.forward_s(pp)
    ops: list[Op] = [Op(MARK), Op(HOST, dur=0.004 * work.step_s)]

    def compute(mb: int, phase: int) -> None:
        dur = (fwd if phase == FORWARD else 2 * fwd) / work.chunks
        for _ in range(work.chunks):
            ops.append(Op(COMPUTE, dur=dur, phase=phase, mb=mb))
            if tp > 1:
                ops.append(Op(COLL, role="tp", wire_op=wire.OP_ALLREDUCE, nbytes=work.tp_bytes, phase=phase, mb=mb))

    def p2p(*parts: Part | None) -> None:
        real = tuple(p for p in parts if p is not None)
        if real:
            ops.append(Op(P2P, role="p2p", nbytes=sum(p.nbytes for p in real), parts=real))

    def send_fwd(mb: int) -> Part | None:
        return None if last else Part(SEND, stage + 1, work.p2p_bytes, mb)

    def recv_fwd(mb: int) -> Part | None:
        return None if first else Part(RECV, stage - 1, work.p2p_bytes, mb)

    def send_bwd(mb: int) -> Part | None:
        return None if first else Part(SEND, stage - 1, work.p2p_bytes, mb)

    def recv_bwd(mb: int) -> Part | None:
        return None if last else Part(RECV, stage + 1, work.p2p_bytes, mb)

    warmup = min(pp - stage - 1, m)
    steady = m - warmup
    for mb in range(warmup):
        p2p(recv_fwd(mb))
        compute(mb, FORWARD)
        p2p(send_fwd(mb))
    if steady:
        p2p(recv_fwd(warmup))
    for i in range(steady):
        f, b = warmup + i, i
        compute(f, FORWARD)
        p2p(send_fwd(f), recv_bwd(b))
        compute(b, BACKWARD)
        if i == steady - 1:
            p2p(send_bwd(b))
        else:
            p2p(send_bwd(b), recv_fwd(f + 1))
    for b in range(steady, m):
        p2p(recv_bwd(b))
        compute(b, BACKWARD)
        p2p(send_bwd(b))

    reduce_op = wire.OP_REDUCESCATTER if work.distributed_optimizer else wire.OP_ALLREDUCE
    if dp > 1:
        for _ in range(work.dp_buckets):
            ops.append(Op(COLL, role="grad", wire_op=reduce_op, nbytes=work.grad_bytes))
    if pp > 1 and (first or last):
        ops.append(Op(COLL, role="emb", wire_op=wire.OP_ALLREDUCE, nbytes=4 << 20))
    if tp * pp > 1:
        ops.append(Op(COLL, role="mp", wire_op=wire.OP_ALLREDUCE, nbytes=8, phase=OPTIMIZER))
    ops.append(Op(COMPUTE, dur=0.04 * work.step_s, phase=OPTIMIZER))
    if dp > 1 and work.distributed_optimizer:
        ops.append(Op(COLL, role="gather", wire_op=wire.OP_ALLGATHER, nbytes=work.grad_bytes, phase=OPTIMIZER))
    if dp > 1 and work.loss_allreduce:
        ops.append(Op(COLL, role="loss", wire_op=wire.OP_ALLREDUCE, nbytes=4))
    ops.append(Op(SYNC))
    if blocking:
        ops = _host_blocking(ops)
    return ops


def _host_blocking(ops: list[Op]) -> list[Op]:
    out: list[Op] = []
    for op in ops:
        if op.code in (COLL, P2P):
            out += [Op(SYNC), op, Op(SYNC)]
        else:
            out.append(op)
    return out
