"""`commwatch bench throughput`: how fast the detectors go, and how much they hold.

Five measurements, printed as a table (JSON with --json):

- replay: the detector core (`Detector`) over a simulated job of 32, 1k, 8k and 32k ranks
  on one core. The messages are generated into memory first (not timed); then they are
  decoded alone, detected alone (decoded beforehand) and both, exactly as `commwatch replay`
  does (chunks decoded together, every message fed and time advanced with it). Call
  records/s by process CPU time (and by wall time for both); the process RSS growth while
  the detector ran, and the bytes of the detector's state at the end (`deep_size`, per rank).
- start-up: `commwatch replay --stats` of a small capture in a fresh interpreter (its
  bytecode compiled, as installed): the time not spent reading or detecting, and records/s
  after start-up and in all.
- bounded: the bytes the detector holds (every object it reaches) after a 10-minute and a
  1-hour run of the same small job (10 and 15 minutes with --quick): about equal if its
  state is bounded.
- engine: the worker's engine (`bench_pipeline.py`: both halves fed polls as the worker
  feeds them, without the broker) over the live flood's job and a 1024-rank job at
  wall-clock pace: what the live figures cost per record on one core.
- live: the real pipeline (`commwatch worker` processes on the embedded broker, fresh
  topics) with 1 and 2 workers: call records/s end to end over a flood of about 1M records
  (120 s of a 64-rank job; first message produced to last record consumed, from the
  workers' metrics); then, at load, jobs paced at wall-clock speed, each with a hang, while
  another 64-rank job's records are offered at `--load` call records/s (300k by default, its
  event time running faster than the wall clock): the delay from fault + detection threshold
  to each alert's arrival, the records/s decoded meanwhile, the workers' CPU and how far
  they fell behind. A burst says how fast a worker drains; only the load phase says whether
  it keeps up and still alerts on time.

The simulated node agents batch calls as `COMMWATCH_AGENT_FLUSH_S` says (0.1 s by default;
`--set agent_flush_s=1.0` measures the replay and the live flood with 1 s batches).

--quick takes about three minutes (plus up to two more when a worker group never starts
consuming: that run is reported as an error row, not timed).
"""

from __future__ import annotations

import argparse
import collections
import gc
import heapq
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import psutil

from commwatch import collector, topics
from commwatch.capture import CaptureWriter
from commwatch.decode import decode_messages
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.settings import Settings
from commwatch.streams.bench_pipeline import pipeline_runs
from commwatch.streams.detect import Detector
from commwatch.wire import WireError

SHAPES = {1024: (8, 4, 32), 8192: (8, 8, 128), 32768: (8, 8, 512)}  # ranks -> (tp, pp, dp)
WARM_TIMEOUT_S = 120.0
GROUP_SETTLE_S = 8.0  # > the session and rebalance timeouts (6 s by default)
LOAD_S = 30.0  # seconds of records generated for the load phase at the offered rate
CALLS_PER_RANK_S = 145  # what the simulator's default job issues (measured), to size runs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true",
                   help="small sizes: about 3 minutes (up to 2 more if a worker group fails to start)")
    p.add_argument("--ranks", help="comma-separated job sizes for the replay part (1024, 8192, 32768)")
    p.add_argument("--records", type=float, help="call records per replay run (sets the simulated seconds)")
    p.add_argument("--load", type=float, default=3e5,
                   help="call records/s offered to the live workers while the hang delays are measured")
    p.add_argument("--skip-live", action="store_true", help="detector core only, no broker or workers")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def shape(ranks: int) -> tuple[int, int, int]:
    if ranks in SHAPES:
        return SHAPES[ranks]
    if ranks % 32:
        raise SystemExit(f"commwatch bench throughput: --ranks {ranks}: use a multiple of 32 (tp=8, pp=4)")
    return 8, 4, ranks // 32


# ------------------------------------------------------------------------------ replay
def replay_run(settings: Settings, ranks: int, records: float) -> dict:
    """One simulated job through the detector core, on this process's one core: decode
    alone, detect alone (on messages decoded beforehand) and both (as `commwatch replay`
    does: chunks decoded together, then fed in time order); CPU seconds of each."""
    import river.drift  # noqa: F401  imported on a rank's first hot window: start-up's cost, not the rate's
    from commwatch.streams.replay import CHUNK

    tp, pp, dp = shape(ranks)
    sim_s = max(0.5, round(records / (ranks * CALLS_PER_RANK_S), 2))
    spec = JobSpec(job="bench", tp=tp, pp=pp, dp=dp, duration_s=sim_s, batch_s=settings.agent_flush_s)
    sim = simulate(spec)
    t0 = time.perf_counter()
    msgs = list(sim.messages())
    gen_s = time.perf_counter() - t0
    chunks = [msgs[i:i + CHUNK] for i in range(0, len(msgs), CHUNK)]
    gc.collect()
    collector.settle()  # as `commwatch replay` does once its capture is read
    c0 = time.process_time()
    decoded = [d for chunk in chunks for d in decode_messages(chunk, settings.max_message_bytes)]
    decode_cpu = time.process_time() - c0
    refused = sum(isinstance(d, WireError) for d in decoded)
    det = Detector(settings)
    c0 = time.process_time()
    det.feed_stream(msgs, decoded)
    det.tick(msgs[-1].ts_ns + 1)
    detect_cpu = time.process_time() - c0
    del decoded, det
    gc.collect()
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    det = Detector(settings)
    incidents = 0
    c0, w0 = time.process_time(), time.perf_counter()
    for chunk in chunks:
        incidents += len(det.feed_stream(chunk, decode_messages(chunk, settings.max_message_bytes)))
    incidents += len(det.tick(msgs[-1].ts_ns + 1))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rss = proc.memory_info().rss - rss0
    n = det.stats["records"]
    del msgs, chunks
    det.window_stats()  # drained as the ClickHouse sink drains them
    state = deep_size(det)
    return {
        "ranks": ranks, "tp": tp, "pp": pp, "dp": dp, "sim_s": sim_s, "messages": det.stats["messages"],
        "records": n, "records_per_message": round(n / max(1, sim.stats.by_topic[topics.CALLS]), 1),
        "refused": refused, "generate_s": round(gen_s, 2),
        "decode_cpu_s": round(decode_cpu, 2), "detect_cpu_s": round(detect_cpu, 2),
        "decode_records_per_cpu_s": round(n / decode_cpu), "detect_records_per_cpu_s": round(n / detect_cpu),
        "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
        "records_per_cpu_s": round(n / cpu), "records_per_wall_s": round(n / wall),
        "rss_growth_mb": round(rss / 2**20, 1), "state_mb": round(state / 2**20, 1),
        "state_mb_per_1k_ranks": round(state / 2**20 / (ranks / 1024), 2),
        "state_kb_per_rank": round(state / 1024 / ranks, 1),
        "incidents": incidents,
    }


def startup_run(settings: Settings, ranks: int = 32, sim_s: float = 10.0) -> dict:
    """`commwatch replay --stats` of a small capture in a fresh interpreter: its wall time in
    all, and what of it was start-up (the interpreter, imports and exit: all but reading the
    file and detecting). Run twice with bytecode caches writable: the first run compiles the
    modules (an installed package has them compiled), the second is the figure; an
    environment that forbids caches (PYTHONDONTWRITEBYTECODE) would compile at every run."""
    tp, pp, dp = shape(ranks)
    runs = []
    with tempfile.TemporaryDirectory(prefix="cw-bench-") as d:
        path = Path(d) / "small.cwcap"
        sim = simulate(JobSpec(job="small", tp=tp, pp=pp, dp=dp, duration_s=sim_s))
        with CaptureWriter(path) as w:
            for m in sim.messages():
                w.write(m)
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_") and k != "PYTHONDONTWRITEBYTECODE"}
        for _ in range(2):
            t0 = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "commwatch.cli", "replay", "--stats", str(path)], env=env,
                                 capture_output=True, text=True, check=True)
            total = time.perf_counter() - t0
            m = re.search(r"read ([0-9.]+) s, detect ([0-9.]+) s", res.stderr)
            read_s, detect_s = (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.0)
            runs.append((total, read_s, detect_s))
    (first, _, _), (total, read_s, detect_s) = runs
    return {"ranks": ranks, "sim_s": sim_s, "records": sim.stats.records, "total_s": round(total, 2),
            "startup_s": round(total - read_s - detect_s, 2), "read_s": read_s, "detect_s": detect_s,
            "first_run_total_s": round(first, 2),
            "records_per_s_after_startup": round(sim.stats.records / max(1e-9, read_s + detect_s)),
            "records_per_s_in_all": round(sim.stats.records / total)}


def deep_size(obj, seen: set[int] | None = None) -> int:
    """Bytes held by `obj` and everything it reaches (numpy buffers included); modules,
    classes, functions and the shared settings object are not the detector's state."""
    seen = set() if seen is None else seen
    stack, total = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (type, types.ModuleType, types.FunctionType, Settings)):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)  # a numpy array that owns its buffer counts it here
        if isinstance(o, np.ndarray):
            if o.base is not None:
                stack.append(o.base)
        elif isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(o)
        else:
            if hasattr(o, "__dict__"):
                stack.append(vars(o))
            for slot in getattr(type(o), "__slots__", ()):
                if hasattr(o, slot):
                    stack.append(getattr(o, slot))
    return total


def state_after(settings: Settings, spec: JobSpec) -> tuple[int, int]:
    """Bytes the detector holds after the whole run (`deep_size`), and its records. Per-rank
    window rows are drained as the ClickHouse sink drains them (`window_stats()`)."""
    det = Detector(settings)
    last = 0
    for i, m in enumerate(simulate(spec).messages()):  # streamed: only the detector keeps anything
        det.feed(m)
        det.tick(m.ts_ns)
        last = m.ts_ns
        if i % 1000 == 0:
            det.window_stats()
    det.tick(last + 1)
    det.window_stats()
    return deep_size(det), det.stats["records"]


def bounded_run(settings: Settings, short_s: float, factor: float) -> dict:
    """8 ranks, 1 s steps with few calls each (every per-step, per-heartbeat and per-sample
    structure fills as in a real job; fewer calls keep the hour-long run fast)."""
    out = {"ranks": 8, "step_s": 1.0}
    for label, sim_s in (("short", short_s), ("long", factor * short_s)):
        spec = JobSpec(job="bounded", tp=2, pp=2, dp=2, duration_s=sim_s, microbatches=1, tp_calls=2)
        t0 = time.perf_counter()
        held, n = state_after(settings, spec)
        out[label] = {"sim_s": sim_s, "records": n, "retained_kb": round(held / 1024, 1),
                      "seconds": round(time.perf_counter() - t0, 1)}
    out["long_over_short"] = round(out["long"]["retained_kb"] / max(1e-9, out["short"]["retained_kb"]), 2)
    return out


# ------------------------------------------------------------------------------ live
class Workers:
    """`commwatch worker` subprocesses on one broker and prefix, with their metrics ports."""

    def __init__(self, settings: Settings, count: int, logdir: Path):
        self.settings, self.procs, self.ports, self.logs = settings, [], [], []
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
        env.update({"COMMWATCH_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
                    "COMMWATCH_TOPIC_PREFIX": settings.topic_prefix,
                    "COMMWATCH_KAFKA_PARTITIONS": str(settings.kafka_partitions),
                    "COMMWATCH_METRICS_PORT": "0", "COMMWATCH_LOG_LEVEL": "WARNING"})
        for i in range(count):
            # one log per run: a log reused across runs would hold an earlier run's metrics address
            log = logdir / f"worker{i}-{settings.topic_prefix}.log"
            data = logdir / f"w{i}-{settings.topic_prefix}"
            data.mkdir(parents=True, exist_ok=True)
            env["COMMWATCH_DATA_DIR"] = str(data)
            with open(log, "wb") as out:
                self.procs.append(subprocess.Popen([sys.executable, "-m", "commwatch.cli", "worker"], env=env,
                                                   stdout=out, stderr=subprocess.STDOUT))
            self.logs.append(log)
        for proc, log in zip(self.procs, self.logs):
            self.ports.append(self._port(proc, log))

    @staticmethod
    def _port(proc: subprocess.Popen, log: Path) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = re.search(rb"metrics on http://[^:]+:(\d+)/metrics", log.read_bytes())
            if m:
                return int(m.group(1))
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited at start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"worker printed no metrics address:\n{log.read_text()[-2000:]}")

    def records(self) -> int:
        total = 0
        for proc, port, log in zip(self.procs, self.ports, self.logs):
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                continue  # not serving yet, or busy: counted at the next poll
            m = re.search(r"^commwatch_stream_records_total ([0-9.e+]+)$", body, re.M)
            total += int(float(m.group(1))) if m else 0
        return total

    def wait_records(self, n: int, timeout_s: float, settle_s: float = 5.0) -> tuple[int, float]:
        """Records decoded so far and the wall time (perf_counter) of the last increase,
        once `n` are decoded or the count has stood still for `settle_s`."""
        deadline = time.monotonic() + timeout_s
        last, at = -1, time.perf_counter()
        while time.monotonic() < deadline:
            got = self.records()
            if got != last:
                last, at = got, time.perf_counter()
            if got >= n or time.perf_counter() - at >= settle_s and got > 0:
                return got, at
            time.sleep(0.05)
        return last, at

    def cpu_s(self) -> float:
        """CPU seconds the workers have used so far (user + system)."""
        total = 0.0
        for proc in self.procs:
            try:
                t = psutil.Process(proc.pid).cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def produce(settings: Settings, msgs, realtime: bool = False) -> None:
    from commwatch.kafka import Sender

    sender = Sender(settings, settings.kafka_bootstrap)
    for m in msgs:
        if realtime:
            delay = m.ts_ns / 1e9 - time.time()
            if delay > 0:
                sender.producer.poll(0)
                time.sleep(delay)
        while not sender.send(settings.topics.name(m.topic), m.key, m.value, timestamp_ms=m.ts_ns // 1_000_000):
            sender.producer.poll(0.05)
    if sender.flush(60):
        raise RuntimeError("messages left undelivered")


class AlertWatch:
    """Wall-clock arrival time of every incident on the alerts topic (background thread)."""

    def __init__(self, settings: Settings):
        from commwatch.kafka import consumer

        self.arrivals: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._c = consumer(settings, settings.kafka_bootstrap, group="bench" + uuid.uuid4().hex)
        self._c.subscribe([settings.topics.alerts])
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._c.poll(0.1)
            if msg is not None and not msg.error():
                self.arrivals.append((time.time(), json.loads(msg.value())))

    def first_open(self, job: str, kind: str) -> tuple[float, dict] | None:
        return next(((t, inc) for t, inc in self.arrivals
                     if inc["job"] == job and inc["kind"] == kind and inc["status"] == "open"), None)

    def close(self) -> None:
        self._stop.set()
        self._t.join(5)
        self._c.close()


def live_run(settings: Settings, count: int, quick: bool, logdir: Path, offered: float) -> dict:
    from commwatch.kafka import ensure_topics
    from commwatch.streams.app import stream_topics

    s = settings.replace(topic_prefix="bench" + uuid.uuid4().hex[:8])
    ensure_topics(s, s.kafka_bootstrap, stream_topics(s))
    workers = Workers(s, count, logdir)
    watch = AlertWatch(s)
    try:
        started = time.perf_counter()
        # warm-up: the consumer group has joined once a tiny job's records are decoded
        warm = simulate(JobSpec(job="warm", tp=2, pp=1, dp=1, duration_s=1, start_ns=time.time_ns() - 30 * 10**9))
        produce(s, warm.messages())
        if workers.wait_records(warm.stats.records, WARM_TIMEOUT_S, settle_s=WARM_TIMEOUT_S)[0] < warm.stats.records:
            return {"workers": count, "partitions": s.kafka_partitions,
                    "error": f"the consumer group decoded {workers.records()} of the warm-up job's "
                             f"{warm.stats.records} records in {WARM_TIMEOUT_S:g} s"}
        time.sleep(GROUP_SETTLE_S)  # a later worker's join rebalances the group: let it finish
        ready_s = time.perf_counter() - started
        # throughput: one job, produced as fast as the producer goes, in the recent past
        sim_s = 8 if quick else 120  # ~1M records: a rate held for seconds, not a burst
        spec = JobSpec(job="flood", tp=8, pp=2, dp=4, duration_s=sim_s, batch_s=s.agent_flush_s,
                       start_ns=time.time_ns() - int((sim_s + 5) * 1e9))
        sim = simulate(spec)
        msgs = list(sim.messages())
        before = workers.records()
        t0 = time.perf_counter()
        produce(s, msgs)
        produced = time.perf_counter() - t0
        got, done = workers.wait_records(before + sim.stats.records, 300, settle_s=10.0)
        decoded = got - before
        rate = decoded / (done - t0)
        # delay at load: jobs paced at wall-clock speed, each with one hang, while another
        # job's records are offered at `offered` records/s
        n_msgs = len(msgs)
        del msgs
        loaded = under_load(s, watch, workers, offered, quick)
    finally:
        watch.close()
        workers.stop()
    return {"workers": count, "partitions": s.kafka_partitions, "ready_s": round(ready_s, 1),
            "records": sim.stats.records, "records_decoded": decoded, "messages": n_msgs, "produce_s": round(produced, 2),
            "end_to_end_s": round(done - t0, 2), "records_per_s": round(rate), **loaded}


def _records_in(m) -> int:
    """Call records a message carries (a call batch's header count; 0 for other topics)."""
    return struct.unpack_from("<I", m.value, 8)[0] if m.topic == topics.CALLS else 0


def _renamed(m, old: str, new: str):
    """The message as job `new` sent it (`old` and `new` of one length: a call batch's
    binary value names no job, the JSON values name it once as a string)."""
    key = new + m.key[len(old):] if m.key and m.key.startswith(old) else m.key
    value = m.value if m.topic == topics.CALLS else m.value.replace(f'"{old}"'.encode(), f'"{new}"'.encode())
    return m._replace(key=key, value=value)


def under_load(s: Settings, watch: AlertWatch, workers: Workers, offered: float, quick: bool) -> dict:
    """`paced_hangs` while a long job's call records are offered at `offered` records/s
    (its event time runs faster than the wall clock, as for a worker catching up), from the
    first hang job's start until every hang alerted or 20 s after the last fault: the alert
    delays at that load, the records/s the workers decoded meanwhile, their CPU, and how far
    they fell behind (records offered and not yet decoded, sampled every 0.5 s; the hang
    jobs' own records, a few thousand a second, are not counted as offered). The job is
    generated beforehand for `LOAD_S` at that rate (half with --quick; not timed); should the
    window last longer, it is sent again as another job (`load_passes`)."""
    sim_s = round(offered * (LOAD_S / 2 if quick else LOAD_S) / (64 * CALLS_PER_RANK_S))
    flood = list(simulate(JobSpec(job="loads", tp=8, pp=2, dp=4, duration_s=sim_s, batch_s=s.agent_flush_s,
                                  start_ns=time.time_ns() - int((sim_s + 5) * 1e9))).messages())
    counts = [_records_in(m) for m in flood]
    result: dict = {}
    hangs = threading.Thread(target=lambda: result.update(paced_hangs(s, watch, quick)), daemon=True)
    before, cpu0 = workers.records(), workers.cpu_s()
    sent, behind, passes = 0, [], 0
    t0 = time.perf_counter()
    next_sample = t0 + 0.5
    hangs.start()
    from commwatch.kafka import Sender

    sender = Sender(s, s.kafka_bootstrap)
    while hangs.is_alive():
        passes += 1
        name = f"l{passes:04d}"
        for m, n in zip(flood, counts):
            if not hangs.is_alive():
                break
            m = _renamed(m, "loads", name) if passes > 1 else m
            while not sender.send(s.topics.name(m.topic), m.key, m.value, timestamp_ms=m.ts_ns // 1_000_000):
                sender.producer.poll(0.05)
            sent += n
            now = time.perf_counter()
            ahead = sent / offered - (now - t0)
            if ahead > 0.005:
                sender.producer.poll(0)
                time.sleep(ahead)
            if now >= next_sample:
                next_sample = now + 0.5
                behind.append(sent - (workers.records() - before))
    elapsed = time.perf_counter() - t0
    decoded, cpu = workers.records() - before, workers.cpu_s() - cpu0
    sender.flush(60)
    hangs.join()
    decoded -= result.get("hang_job_records", 0)  # all sent by then: the flood's share
    return {"load_offered_per_s": round(offered), "load_s": round(elapsed, 1), "load_passes": passes,
            "load_sent_per_s": round(sent / elapsed), "load_decoded_per_s": round(decoded / elapsed),
            "load_worker_cpu_per_s": round(cpu / elapsed, 2),
            "load_behind_max_records": max(behind, default=0),
            "load_behind_last_records": behind[-1] if behind else 0, **result}


def paced_hangs(s: Settings, watch: AlertWatch, quick: bool) -> dict:
    """Jobs sent at wall-clock pace (event time = wall time), each with a hang; the delay
    of each alert's arrival beyond fault onset + the detection threshold it applied."""
    n_jobs, every = (3, 2.0) if quick else (8, 1.0)
    start = time.time_ns() + 2 * 10**9
    sims = []
    for j in range(n_jobs):
        at = 5.0 + j * every
        sims.append(simulate(JobSpec(job=f"hang{j}", tp=2, pp=2, dp=2, step_s=0.5, duration_s=at + 10,
                                     start_ns=start, seed=j), [parse_fault(f"hang:rank={j % 8},at={at}s")]))
    merged = heapq.merge(*(sim.messages() for sim in sims), key=lambda m: m.ts_ns)
    produce(s, merged, realtime=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(watch.first_open(sim.spec.job, "hang") is None for sim in sims):
        time.sleep(0.2)
    beyond, missed, culprit_ok = [], 0, 0
    for sim in sims:
        got = watch.first_open(sim.spec.job, "hang")
        if got is None:
            missed += 1
            continue
        arrived, inc = got
        truth = sim.truth()[0]
        threshold = float(inc["evidence"].get("threshold_s", s.hang_floor_s))
        beyond.append(arrived - (truth["at_ns"] / 1e9 + threshold))
        culprit_ok += inc["culprit_ranks"] == truth["ranks"]
    out = {"hangs": n_jobs, "hangs_alerted": n_jobs - missed, "culprit_right": culprit_ok,
           "hang_job_records": sum(sim.stats.records for sim in sims)}
    if beyond:
        out["delay_beyond_threshold_p50_s"] = round(float(np.percentile(beyond, 50)), 2)
        out["delay_beyond_threshold_p99_s"] = round(float(np.percentile(beyond, 99)), 2)
        out["delay_beyond_threshold_max_s"] = round(max(beyond), 2)
    return out


def live(settings: Settings, quick: bool, offered: float) -> list[dict]:
    from commwatch.embedded import EmbeddedBroker

    with tempfile.TemporaryDirectory(prefix="cw-bench-") as d:
        broker = EmbeddedBroker(log_path=Path(d) / "broker.log").start()
        try:
            s = settings.replace(kafka_bootstrap=broker.bootstrap, data_dir=d)
            return [live_run(s, count, quick, Path(d), offered) for count in (1, 2)]
        finally:
            broker.stop()


# ------------------------------------------------------------------------------ command
def run(args: argparse.Namespace, settings: Settings) -> int:
    sizes = [int(x) for x in args.ranks.split(",")] if args.ranks else [32, 1024, 8192] if args.quick else [
        32, 1024, 8192, 32768]
    records = args.records or (1.5e5 if args.quick else 2.5e6)
    result: dict = {"machine": f"{os.cpu_count()} cpu, {psutil.virtual_memory().total / 2**30:.0f} GiB",
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    "replay": [replay_run(settings, r, records) for r in sizes],
                    "startup": startup_run(settings),
                    "bounded": bounded_run(settings, 600.0, 1.5 if args.quick else 6.0),
                    "engine": pipeline_runs(settings, args.quick)}
    if not args.skip_live:
        result["live"] = live(settings, args.quick, args.load)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


def print_table(res: dict) -> None:
    print(f"machine: {res['machine']}, load average {res['load_avg_1m']} at start")
    print("\ndetector core, replay, one core (records/s per CPU second; both = decode + detect as replay runs them)")
    cols = ("ranks", "sim_s", "records", "records_per_message", "decode_records_per_cpu_s",
            "detect_records_per_cpu_s", "records_per_cpu_s", "records_per_wall_s", "rss_growth_mb", "state_mb",
            "state_kb_per_rank")
    heads = ("ranks", "sim_s", "records", "rec/msg", "decode/s", "detect/s", "both/s", "both/wall s", "rss+ MiB",
             "state MiB", "KiB/rank")
    print("  ".join(f"{c:>11}" for c in heads))
    for row in res["replay"]:
        print("  ".join(f"{row[c]:>11}" for c in cols))
    st = res["startup"]
    print(f"\nstart-up: `commwatch replay` of a {st['ranks']}-rank capture ({st['records']} records, {st['sim_s']:g} s): "
          f"{st['total_s']} s in all, {st['startup_s']} s of start-up (interpreter, imports, exit), read "
          f"{st['read_s']} s, detect {st['detect_s']} s: {st['records_per_s_after_startup']:,} records/s after "
          f"start-up, {st['records_per_s_in_all']:,} in all (the run before, compiling bytecode: "
          f"{st['first_run_total_s']} s in all)")
    b = res["bounded"]
    print(f"\nstate bound, {b['ranks']} ranks: retained {b['short']['retained_kb']} KiB after {b['short']['sim_s']:g} s "
          f"({b['short']['records']} records), {b['long']['retained_kb']} KiB after {b['long']['sim_s']:g} s "
          f"({b['long']['records']} records): x{b['long_over_short']}")
    print("\nthe worker's engine, one core, no broker (both halves, reports bundled between them: "
          "`bench_pipeline.py`)")
    table(res["engine"], ("ranks", "pace", "sim_s", "records", "cpu_s", "records_per_cpu_s"))
    if "live" in res:
        print("\nlive pipeline, embedded broker: a flood sent as fast as the producer goes")
        table(res["live"], ("workers", "partitions", "ready_s", "records", "records_decoded", "produce_s", "end_to_end_s",
                            "records_per_s"))
        print("\nat load: hang jobs paced at wall-clock speed while flood records are offered at a set rate "
              "(behind: records offered and not yet decoded)")
        table(res["live"], ("workers", "load_offered_per_s", "load_s", "load_sent_per_s", "load_decoded_per_s",
                            "load_worker_cpu_per_s", "load_behind_max_records", "load_behind_last_records", "hangs", "hangs_alerted",
                            "culprit_right", "delay_beyond_threshold_p50_s", "delay_beyond_threshold_p99_s"))


def table(rows: list[dict], cols: tuple[str, ...]) -> None:
    print("  ".join(cols))
    for row in rows:
        if "error" in row:
            print(f"{row['workers']} worker(s): {row['error']}")
            continue
        print("  ".join(f"{row.get(c, '-')!s:>{len(c)}}" for c in cols))
