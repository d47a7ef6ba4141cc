"""Hardware samples (cw.hw.v1): NVML per GPU, InfiniBand counters, host CPU and memory.

NVML readings are first taken as *raw* values, named after the NVML call that returns
them, then converted by `gpu_fields()`. A live node reads them with nvidia-ml-py
(`PynvmlReader`); without a GPU, `ReplayReader` replays recorded raw readings (JSON
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
| ecc_uncorrected_volatile | nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE_ECC) | count |
| xid_events | nvmlEventSetWait_v2 on nvmlEventTypeXidCriticalError | list of XIDs since last sample |
| nvlink_errors | nvmlDeviceGetNvLinkErrorCounter, all links, DL_REPLAY/RECOVERY/CRC_FLIT/CRC_DATA | list per link |
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

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


class ReplayReader:
    """Raw NVML readings from a recording; cycles when it reaches the end."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.samples = [json.loads(line)["devices"] for line in self.path.read_text().splitlines() if line.strip()]
        if not self.samples:
            raise ValueError(f"{self.path}: no NVML samples")
        self.i = 0

    def read(self) -> list[dict]:
        devices = self.samples[self.i % len(self.samples)]
        self.i += 1
        return devices


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

    def _xids(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        if self.events is None:
            return out
        nvml = self.nvml
        index = {self.uuids[i]: i for i in range(len(self.handles))}
        while True:
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

    def read(self) -> list[dict]:
        nvml = self.nvml
        xids = self._xids()
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        out = []
        for i, h in enumerate(self.handles):
            c = self._call
            out.append({
                "index": i, "uuid": self.uuids[i],
                "clock_sm": c(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                "clock_mem": c(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
                "power_usage": c(lambda: nvml.nvmlDeviceGetPowerUsage(h)),
                "temperature": c(lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
                "utilization_gpu": c(lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                "clocks_event_reasons": c(lambda: reasons(h)),
                "ecc_uncorrected_volatile": c(lambda: nvml.nvmlDeviceGetTotalEccErrors(
                    h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)),
                "xid_events": xids.get(i, []),
                "nvlink_errors": self._nvlink(h),
            })
        return out


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

    def __init__(self, nvml: Any = None, ib_root: str | Path = IB_ROOT):
        self.nvml = nvml
        self.ib_root = ib_root
        psutil.cpu_percent(None)  # prime: the next call measures since now

    def sample(self, node: str, ts_ns: int, jobs: dict[str, dict[Any, int]]) -> list[dict]:
        """Messages for every job on this node; `jobs[job]` maps a GPU uuid or device index
        to the rank of that job using it. A GPU no job claims is reported under every job."""
        devices: list[dict] = []
        if self.nvml is not None:
            try:
                devices = self.nvml.read()
            except Exception as exc:
                log.warning("NVML read failed: %s", exc)
                metrics.HW_ERRORS.inc()
        node_fields: dict[str, Any] = {"cpu_pct": psutil.cpu_percent(None),
                                       "mem_used_bytes": int(psutil.virtual_memory().used)}
        ib = ib_counters(self.ib_root)
        if ib:
            node_fields["ib"] = ib
        claimed = {key for ranks in jobs.values() for key in ranks}
        msgs = []
        for job, rank_of_gpu in jobs.items():
            for raw in devices:
                rank = rank_of_gpu.get(raw.get("uuid"), rank_of_gpu.get(raw.get("index")))
                if rank is None and (raw.get("uuid") in claimed or raw.get("index") in claimed):
                    continue  # another job's GPU
                msg = {"v": 1, "job": job, "node": node, "ts_ns": ts_ns, **gpu_fields(raw)}
                if rank is not None:
                    msg["rank"] = rank
                msgs.append(msg)
            msgs.append({"v": 1, "job": job, "node": node, "ts_ns": ts_ns, **node_fields})
        metrics.HW_SAMPLES.inc(len(msgs))
        return msgs
