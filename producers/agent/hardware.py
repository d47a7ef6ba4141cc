"""Hardware samples (cw.hw.v1): NVML per GPU, InfiniBand counters, host CPU and memory.

NVML readings are first taken as *raw* values, named after the NVML call that returns
them, then converted by `gpu_fields()`. A live node reads them with nvidia-ml-py
(`PynvmlReader`); without a GPU, `ReplayReader` replays raw readings from a file (JSON
Lines, one line per sample: `{"ts_ns": ..., "devices": [raw, ...]}`) through the same
conversion. Raw keys of one device:

| key | NVML call | unit |
|---|---|---|
| index, uuid | nvmlDeviceGetHandleByIndex, nvmlDeviceGetUUID | |
| clock_sm, clock_mem | nvmlDeviceGetClockInfo(NVML_CLOCK_SM / NVML_CLOCK_MEM) | MHz |
| power_usage | nvmlDeviceGetPowerUsage | mW |
| temperature | nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) | C |
| utilization_gpu | nvmlDeviceGetUtilizationRates().gpu | % |
| clocks_event_reasons | nvmlDeviceGetCurrentClocksEventReasons (throttle reasons) | bitmask |
| ecc_uncorrected_volatile | nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE_ECC) | count since driver load |
| xid_events | nvmlEventSetWait_v2 on nvmlEventTypeXidCriticalError | list of XIDs since last sample |
| nvlink_errors | nvmlDeviceGetNvLinkErrorCounter, all links, DL_REPLAY/RECOVERY/CRC_FLIT/CRC_DATA | list per link |

NVML runs on threads of its own (`NvmlWorker`): a GPU that falls off the bus can block an
NVML call for minutes, and the agent's loop (heartbeats) must never wait on it. A call
that has not returned after `agent_nvml_timeout_s` makes its GPU "not answering": the
sample of that GPU says `"nvml_timeout": true` (hardware evidence on its rank) until the
call returns. Counters are published as deltas since the previous sample (`ecc_dbe`,
`nvlink_errors`; `xid` is the last XID seen since the previous sample, else 0), so an old
error is reported once, not forever; the first sample of a GPU is the baseline.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil

from commwatch.producers.agent import metrics

log = logging.getLogger(__name__)

IB_ROOT = "/sys/class/infiniband"


def gpu_fields(raw: dict) -> dict:
    """cw.hw.v1 fields from one device's raw NVML readings (missing readings are omitted)."""
    out: dict[str, Any] = {}
    if raw.get("uuid"):
        out["gpu"] = str(raw["uuid"])
    for src, dst in (("clock_sm", "sm_clock_mhz"), ("clock_mem", "mem_clock_mhz"), ("temperature", "temp_c"),
                     ("utilization_gpu", "util_pct")):
        if raw.get(src) is not None:
            out[dst] = int(raw[src])
    if raw.get("power_usage") is not None:
        out["power_w"] = round(raw["power_usage"] / 1000.0, 1)
    if raw.get("clocks_event_reasons") is not None:
        out["throttle_reasons"] = int(raw["clocks_event_reasons"])
    if raw.get("ecc_uncorrected_volatile") is not None:
        out["ecc_dbe"] = int(raw["ecc_uncorrected_volatile"])
    if raw.get("xid_events") is not None:
        xids = raw["xid_events"]
        out["xid"] = int(xids[-1]) if xids else 0
    if raw.get("nvlink_errors") is not None:
        out["nvlink_errors"] = int(sum(sum(link) for link in raw["nvlink_errors"]))
    return out


Mark = Callable[[int, str], None]  # (device index or -1, NVML call) before each call


def _no_mark(device: int, call: str) -> None:
    pass


class ReplayReader:
    """Raw NVML readings from a file; cycles when it reaches the end.

    A scripted device may carry `"_block_s": S`: reading it then blocks for S seconds,
    as an NVML call to a GPU that fell off the bus does.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.samples = [json.loads(line)["devices"] for line in self.path.read_text().splitlines() if line.strip()]
        if not self.samples:
            raise ValueError(f"{self.path}: no NVML samples")
        self.i = 0

    def read(self, mark: Mark = _no_mark, skip: frozenset[int] = frozenset()) -> list[dict]:
        devices = self.samples[self.i % len(self.samples)]
        self.i += 1
        out = []
        for raw in devices:
            index = raw.get("index", -1)
            if index in skip:
                continue
            mark(index, "replay")
            if raw.get("_block_s"):
                time.sleep(raw["_block_s"])
            out.append({k: v for k, v in raw.items() if not k.startswith("_")})
        return out


class PynvmlReader:
    """Raw readings from the GPUs through nvidia-ml-py; a reading that fails is left out."""

    ERRORS = ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY", "NVML_NVLINK_ERROR_DL_CRC_FLIT",
              "NVML_NVLINK_ERROR_DL_CRC_DATA")

    def __init__(self, nvml: Any):
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.uuids = [self._call(lambda h=h: self._str(nvml.nvmlDeviceGetUUID(h))) for h in self.handles]
        self.events = None
        try:
            self.events = nvml.nvmlEventSetCreate()
            for h in self.handles:
                nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, self.events)
        except Exception as exc:  # not supported on this GPU/driver
            log.info("NVML XID events unavailable: %s", exc)
            self.events = None

    @staticmethod
    def _str(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    @staticmethod
    def _call(fn: Any) -> Any:
        try:
            return fn()
        except Exception:
            metrics.HW_ERRORS.inc()
            return None

    def _xids(self, mark: Mark) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        if self.events is None:
            return out
        nvml = self.nvml
        index = {self.uuids[i]: i for i in range(len(self.handles))}
        while True:
            mark(-1, "nvmlEventSetWait_v2")
            try:
                data = nvml.nvmlEventSetWait_v2(self.events, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: no more events
                return out
            uuid = self._call(lambda: self._str(nvml.nvmlDeviceGetUUID(data.device)))
            out.setdefault(index.get(uuid, -1), []).append(int(data.eventData))

    def _nvlink(self, h: Any) -> list[list[int]] | None:
        nvml = self.nvml
        counters = [getattr(nvml, name) for name in self.ERRORS if hasattr(nvml, name)]
        links = []
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if not nvml.nvmlDeviceGetNvLinkState(h, link):
                    continue
                links.append([int(nvml.nvmlDeviceGetNvLinkErrorCounter(h, link, c)) for c in counters])
            except Exception:
                continue
        return links

    def read(self, mark: Mark = _no_mark, skip: frozenset[int] = frozenset()) -> list[dict]:
        nvml = self.nvml
        xids = self._xids(mark) if -1 not in skip else {}
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        out = []
        for i, h in enumerate(self.handles):
            if i in skip:
                continue

            def c(name: str, fn: Callable[[], Any], i: int = i) -> Any:
                mark(i, name)
                return self._call(fn)

            out.append({
                "index": i, "uuid": self.uuids[i],
                "clock_sm": c("nvmlDeviceGetClockInfo", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                "clock_mem": c("nvmlDeviceGetClockInfo",
                               lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
                "power_usage": c("nvmlDeviceGetPowerUsage", lambda: nvml.nvmlDeviceGetPowerUsage(h)),
                "temperature": c("nvmlDeviceGetTemperature",
                                 lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
                "utilization_gpu": c("nvmlDeviceGetUtilizationRates",
                                     lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                "clocks_event_reasons": c("nvmlDeviceGetCurrentClocksEventReasons", lambda: reasons(h)),
                "ecc_uncorrected_volatile": c("nvmlDeviceGetTotalEccErrors", lambda: nvml.nvmlDeviceGetTotalEccErrors(
                    h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)),
                "xid_events": xids.get(i, []),
                "nvlink_errors": c("nvmlDeviceGetNvLinkErrorCounter", lambda: self._nvlink(h)),
            })
        return out


class NvmlWorker:
    """Reads NVML on a thread of its own, one pass every `period_s`.

    The agent's loop calls `check()` and `take()`, which never wait on NVML. A call that
    has not returned after `timeout_s` marks its device (-1: the node's event wait) as not
    answering; that thread cannot be interrupted, so it is abandoned and a fresh one reads
    the other devices. When the stuck call finally returns, the device is read again. At
    most `MAX_ABANDONED` threads are left stuck at once; beyond that NVML is left alone.
    """

    MAX_ABANDONED = 4
    QUEUE = 16  # finished passes waiting for the agent's loop

    def __init__(self, reader: Any, period_s: float = 1.0, timeout_s: float = 5.0):
        self.reader = reader
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.lock = threading.Lock()
        self.gen = 0  # the generation of the reading thread; an abandoned thread has an older one
        self.busy: tuple[int, str, float] | None = None  # (device, call, monotonic start) of the current call
        self.stuck: dict[int, int] = {}  # abandoned generation -> device it is stuck on
        self.skip: set[int] = set()  # devices not answering
        self.samples: collections.deque[tuple[int, list[dict]]] = collections.deque(maxlen=self.QUEUE)
        self.stop = threading.Event()
        self.threads = 0

    def start(self) -> None:
        self.threads += 1
        threading.Thread(target=self._run, args=(self.gen,), daemon=True, name=f"commwatch-nvml-{self.gen}").start()

    def _mark(self, gen: int, device: int, call: str) -> None:
        if gen == self.gen:
            self.busy = (device, call, time.monotonic())

    def read_once(self, gen: int | None = None) -> bool:
        """One pass (the thread's loop body); False when this thread was abandoned."""
        gen = self.gen if gen is None else gen
        ts_ns = time.time_ns()
        try:
            devices = self.reader.read(functools.partial(self._mark, gen), frozenset(self.skip))
        except Exception as exc:
            log.warning("NVML read failed: %s", exc)
            metrics.HW_ERRORS.inc()
            devices = None
        with self.lock:
            if gen != self.gen:  # abandoned while stuck, and the call has now returned
                device = self.stuck.pop(gen, None)
                self.skip.discard(device)
                log.warning("NVML: device %s answers again", device)
                return False
            self.busy = None
            if devices is not None:
                self.samples.append((ts_ns, devices))
        return True

    def _run(self, gen: int) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            if not self.read_once(gen):
                return
            self.stop.wait(max(0.0, self.period_s - (time.monotonic() - t0)))

    def check(self) -> set[int]:
        """The devices not answering now."""
        with self.lock:
            busy = self.busy
            if busy is not None and time.monotonic() - busy[2] > self.timeout_s:
                device, call = busy[0], busy[1]
                log.error("NVML: %s on device %s has not returned for %.1f s; reporting the GPU as not "
                          "answering", call, device, time.monotonic() - busy[2])
                metrics.HW_TIMEOUTS.inc()
                self.skip.add(device)
                self.stuck[self.gen] = device
                self.busy = None
                self.gen += 1
                if len(self.stuck) <= self.MAX_ABANDONED:
                    self.start()
                else:
                    log.error("NVML: %d calls stuck; no more NVML readings", len(self.stuck))
            return set(self.skip)

    def take(self) -> list[tuple[int, list[dict]]]:
        """The passes finished since the last call, oldest first, each (ts_ns, devices)."""
        with self.lock:
            out = list(self.samples)
            self.samples.clear()
        return out

    def close(self) -> None:
        self.stop.set()


def open_nvml(replay: str | None = None) -> Any:
    """The NVML reader for this node: a replay file, nvidia-ml-py with a GPU, or None."""
    if replay:
        return ReplayReader(replay)
    try:
        import pynvml
    except ImportError:
        return None
    try:
        return PynvmlReader(pynvml)
    except Exception as exc:  # no driver, no GPU
        log.info("NVML unavailable: %s", exc)
        return None


def ib_counters(root: str | Path = IB_ROOT) -> dict[str, dict[str, int]]:
    """Per HCA: bytes sent/received and symbol errors, summed over ports."""
    out: dict[str, dict[str, int]] = {}
    base = Path(root)
    if not base.is_dir():
        return out
    for dev in sorted(base.iterdir()):
        tx = rx = sym = 0
        for port in (dev / "ports").glob("*"):
            c = port / "counters"
            tx += _read_int(c / "port_xmit_data") * 4  # counted in 4-byte words
            rx += _read_int(c / "port_rcv_data") * 4
            sym += _read_int(c / "symbol_error")
        out[dev.name] = {"tx_bytes": tx, "rx_bytes": rx, "symbol_errors": sym}
    return out


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


class HardwareSampler:
    """One sample = a message per GPU (with its rank when known) and one for the node."""

    def __init__(self, nvml: Any = None, ib_root: str | Path = IB_ROOT, *, period_s: float = 1.0,
                 timeout_s: float = 5.0, threaded: bool = True):
        self.ib_root = ib_root
        self.worker = NvmlWorker(nvml, period_s, timeout_s) if nvml is not None else None
        if self.worker is not None and threaded:
            self.worker.start()
        self.last: dict[Any, dict[str, int]] = {}  # device -> cumulative counters of its previous sample
        self.uuids: dict[int, str] = {}  # device index -> uuid, from earlier readings
        psutil.cpu_percent(None)  # prime: the next call measures since now

    def _deltas(self, raw: dict, fields: dict) -> dict:
        """Counters as the change since this device's previous sample."""
        key = raw.get("uuid") or raw.get("index")
        prev = self.last.setdefault(key, {})
        for name in ("ecc_dbe", "nvlink_errors"):
            if name in fields:
                now = fields[name]
                before = prev.get(name, now)
                prev[name] = now
                fields[name] = now - before if now >= before else now  # below: the counter was reset
        return fields

    def sample(self, node: str, ts_ns: int, jobs: dict[str, dict[Any, int]]) -> list[dict]:
        """Messages for every job on this node; `jobs[job]` maps a GPU uuid or device index
        to the rank of that job using it. A GPU no job claims is reported under every job."""
        passes: list[tuple[int, list[dict]]] = []
        silent: set[int] = set()
        if self.worker is not None:
            silent = self.worker.check()
            passes = self.worker.take()
        gpus: list[tuple[int, dict, dict]] = []  # (ts_ns, raw, fields)
        for t, devices in passes:
            for raw in devices:
                if raw.get("uuid") and raw.get("index") is not None:
                    self.uuids[raw["index"]] = raw["uuid"]
                gpus.append((t, raw, self._deltas(raw, gpu_fields(raw))))
        for index in sorted(silent - {-1}):  # GPUs that stopped answering
            raw = {"index": index, "uuid": self.uuids.get(index)}
            fields = {"gpu": raw["uuid"]} if raw["uuid"] else {}
            gpus.append((ts_ns, raw, {**fields, "nvml_timeout": True}))
        node_fields: dict[str, Any] = {"cpu_pct": psutil.cpu_percent(None),
                                       "mem_used_bytes": int(psutil.virtual_memory().used)}
        if -1 in silent:
            node_fields["nvml_timeout"] = True
        ib = ib_counters(self.ib_root)
        if ib:
            node_fields["ib"] = ib
        claimed = {key for ranks in jobs.values() for key in ranks}
        msgs = []
        for job, rank_of_gpu in jobs.items():
            for t, raw, fields in gpus:
                rank = rank_of_gpu.get(raw.get("uuid"), rank_of_gpu.get(raw.get("index")))
                if rank is None and (raw.get("uuid") in claimed or raw.get("index") in claimed):
                    continue  # another job's GPU
                msg = {"v": 1, "job": job, "node": node, "ts_ns": t, **fields}
                if rank is not None:
                    msg["rank"] = rank
                msgs.append(msg)
            msgs.append({"v": 1, "job": job, "node": node, "ts_ns": ts_ns, **node_fields})
        metrics.HW_SAMPLES.inc(len(msgs))
        return msgs

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
