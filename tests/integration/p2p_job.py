"""Two ranks on gloo exchanging tensors point to point with the commwatch hook installed.

`python p2p_job.py RANK PORT`: isend/irecv, then batch_isend_irecv, then a blocking
send/recv; rings under COMMWATCH_RING_DIR, job COMMWATCH_JOB_ID. Prints "done" and waits
for stdin to close before exiting, so that the test reads the rings of a live writer.
"""

from __future__ import annotations

import datetime
import sys

import torch
import torch.distributed as dist

from commwatch.producers import hook


def main() -> None:
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    hook.install()
    peer = 1 - rank
    a, b = torch.full((8,), float(rank)), torch.zeros(8)
    works = [dist.isend(a, peer), dist.irecv(b, peer)] if rank == 0 else [dist.irecv(b, peer), dist.isend(a, peer)]
    for w in works:
        w.wait()
    ops = [dist.P2POp(dist.isend, a, peer), dist.P2POp(dist.irecv, b, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    if rank == 0:
        dist.send(a, peer)
    else:
        dist.recv(b, peer)
    print("done", flush=True)
    sys.stdin.read()
    hook.uninstall()


if __name__ == "__main__":
    main()
