"""`commwatch simulate`: emulate a training job, with faults, into a capture file or Kafka.

    commwatch simulate --ranks 64 --tp 4 --pp 4 --dp 4 --duration 60 \\
        --fault hang:rank=17,at=30s --out run.cwcap

writes ``run.cwcap`` and the ground truth ``run.cwcap.truth.json``. See
`commwatch.producers.simulate.schedule` for the fault spec forms.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time

from commwatch.producers.simulate.emit import send_kafka, truth_path, write_capture, write_truth
from commwatch.producers.simulate.schedule import FaultError, load_schedule, parse_fault
from commwatch.producers.simulate.simulation import Simulation
from commwatch.producers.simulate.spec import JobSpec
from commwatch.settings import Settings

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=int, required=True, help="world size; must equal tp*pp*dp*cp")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--ep", type=int, default=1, help="expert-parallel size (divides dp)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--duration", type=float, required=True, help="seconds of simulated time")
    p.add_argument("--step-s", type=float, default=1.0, help="healthy iteration time")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--job", default="sim", help="job id")
    p.add_argument("--fault", action="append", default=[], metavar="SPEC",
                   help="e.g. hang:rank=17,at=30s (repeatable)")
    p.add_argument("--faults", metavar="FILE", help="fault schedule, YAML or JSON")
    p.add_argument("--checkpoint-every", type=float, default=0.0, help="seconds between checkpoints (0: never)")
    p.add_argument("--checkpoint-s", type=float, default=20.0, help="length of a checkpoint pause")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", metavar="FILE.cwcap", help="write a capture file (+ FILE.cwcap.truth.json)")
    out.add_argument("--kafka", action="store_true", help="produce to Kafka (COMMWATCH_KAFKA_BOOTSTRAP or the running stack's)")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--realtime", action="store_true", help="pace messages to the wall clock (starts now)")
    pace.add_argument("--fast", action="store_true", help="as fast as possible (default)")
    p.add_argument("--truth", metavar="FILE", help="ground truth path (default: OUT.truth.json, or "
                                                    "sim-JOB.truth.json with --kafka)")


def _fail(msg: str) -> int:
    print(f"commwatch simulate: {msg}", file=sys.stderr)
    return 2


def build(args: argparse.Namespace, start_ns: int | None = None) -> Simulation:
    """The simulation the arguments describe; raises ValueError naming the bad flag."""
    product = args.tp * args.pp * args.dp * args.cp
    if args.ranks != product:
        raise ValueError(f"--ranks {args.ranks} != --tp {args.tp} x --pp {args.pp} x --dp {args.dp} x --cp {args.cp}"
                         f" = {product}")
    for flag in ("tp", "pp", "dp", "cp", "ep", "gpus_per_node", "microbatches"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1")
    for flag in ("duration", "step_s"):
        if not getattr(args, flag) > 0:
            raise ValueError(f"--{flag.replace('_', '-')} must be > 0")
    if args.dp % args.ep:
        raise ValueError(f"--ep {args.ep} must divide --dp {args.dp}")
    if args.checkpoint_every < 0 or args.checkpoint_s < 0:
        raise ValueError("--checkpoint-every and --checkpoint-s must be >= 0")
    faults = [parse_fault(s) for s in args.fault]
    if args.faults:
        faults += load_schedule(args.faults)
    spec = JobSpec(job=args.job, tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, ep=args.ep,
                   gpus_per_node=args.gpus_per_node, duration_s=args.duration, step_s=args.step_s,
                   microbatches=args.microbatches, seed=args.seed, checkpoint_every_s=args.checkpoint_every,
                   checkpoint_s=args.checkpoint_s)
    if start_ns is not None:
        spec = dataclasses.replace(spec, start_ns=start_ns)
    try:
        return Simulation(spec, faults)
    except ValueError as exc:
        raise ValueError(f"--fault: {exc}") from None


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        sim = build(args, start_ns=time.time_ns() if args.realtime else None)
    except (FaultError, ValueError) as exc:
        return _fail(str(exc))
    if args.realtime and not args.kafka:
        return _fail("--realtime needs --kafka")
    t0 = time.perf_counter()
    if args.out:
        truth = args.truth or truth_path(args.out)
        count = write_capture(sim, args.out)
        dest = args.out
    else:
        truth = args.truth or f"sim-{sim.spec.job}.truth.json"
        count, dest = _to_kafka(sim, settings, args.realtime)
        if count < 0:
            return 1
    seconds = time.perf_counter() - t0
    write_truth(truth, sim.truth_document())
    st = sim.stats
    print(f"simulated {sim.layout.world_size} ranks on {sim.layout.n_nodes} nodes for {sim.spec.duration_s:g} s: "
          f"{count} messages, {st.records} call records ({st.iterations} iterations) in {seconds:.2f} s "
          f"-> {dest}; truth: {truth}")
    return 0


def _to_kafka(sim: Simulation, settings: Settings, realtime: bool) -> tuple[int, str]:
    from commwatch import discovery
    from commwatch.kafka import Sender, ensure_topics

    bootstrap = discovery.with_kafka(settings, "commwatch simulate --kafka").kafka_bootstrap
    ensure_topics(settings, bootstrap)
    sender = Sender(settings, bootstrap)
    res = send_kafka(sim.messages(), sender, settings.topics, realtime=realtime)
    if res.failed or res.queued_at_exit:
        print(f"commwatch simulate: {res.failed} messages failed, {res.queued_at_exit} undelivered",
              file=sys.stderr)
        return -1, bootstrap
    return res.sent, f"kafka {bootstrap} (prefix {settings.topic_prefix!r})"
