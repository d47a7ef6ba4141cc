"""Hardware samples: scripted NVML readings through the live conversion and NVML thread's
pass (driven here one pass at a time), counters as deltas, IB counters."""

from __future__ import annotations

from pathlib import Path

from commwatch import messages
from commwatch.producers.agent.hardware import HardwareSampler, ReplayReader, gpu_fields, ib_counters

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml" / "scripted_h100x8_downclock.jsonl"


def test_replayed_samples_are_valid_hw_messages_with_the_downclock():
    sampler = HardwareSampler(ReplayReader(DATA), ib_root="/nonexistent", threaded=False)
    uuid3 = ReplayReader(DATA).read()[3]["uuid"]
    gpu3 = []
    for s in range(30):
        sampler.worker.read_once()
        msgs = sampler.sample("node-7", 1767225600000000000 + s, {"j1": {uuid3: 27, 0: 24}})
        assert len(msgs) == 9  # 8 GPUs + the node
        for m in msgs:
            messages.validate_hw(m)
        gpu3.append(next(m for m in msgs if m.get("gpu") == uuid3))
        assert msgs[0]["rank"] == 24 and "rank" not in msgs[1]
        assert "cpu_pct" in msgs[-1] and "gpu" not in msgs[-1]
    assert all(m["rank"] == 27 for m in gpu3)
    assert [m["sm_clock_mhz"] for m in gpu3[8:12]] == [1980, 1980, 1410, 1410]
    assert gpu3[12]["throttle_reasons"] == 0x60 and gpu3[12]["power_w"] == 431.0 and gpu3[12]["temp_c"] == 88


def test_conversion_of_raw_readings():
    raw = {"uuid": "GPU-x", "clock_sm": 1980, "clock_mem": 2619, "power_usage": 612500, "temperature": 63,
           "utilization_gpu": 98, "clocks_event_reasons": 4, "ecc_uncorrected_volatile": 2,
           "xid_events": [13, 48], "nvlink_errors": [[1, 0, 2, 0], [0, 0, 0, 3]]}
    assert gpu_fields(raw) == {"gpu": "GPU-x", "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "power_w": 612.5,
                               "temp_c": 63, "util_pct": 98, "throttle_reasons": 4, "ecc_dbe": 2, "xid": 48,
                               "nvlink_errors": 6}
    assert gpu_fields({"uuid": "GPU-y", "clock_sm": None}) == {"gpu": "GPU-y"}


def test_xid_and_nvlink_episodes_in_the_recording():
    reader = ReplayReader(DATA)
    fields = [[gpu_fields(d) for d in reader.read()] for _ in range(30)]
    assert fields[25][5]["xid"] == 48 and fields[24][5]["xid"] == 0 and fields[26][5]["ecc_dbe"] == 1
    assert fields[14][6]["nvlink_errors"] == 0 and fields[20][6]["nvlink_errors"] > fields[16][6]["nvlink_errors"]


def test_ib_counters_from_sysfs_layout(tmp_path):
    for port, (tx, rx, sym) in {"1": (100, 200, 1), "2": (5, 5, 0)}.items():
        c = tmp_path / "mlx5_0" / "ports" / port / "counters"
        c.mkdir(parents=True)
        (c / "port_xmit_data").write_text(f"{tx}\n")
        (c / "port_rcv_data").write_text(f"{rx}\n")
        (c / "symbol_error").write_text(f"{sym}\n")
    assert ib_counters(tmp_path) == {"mlx5_0": {"tx_bytes": 420, "rx_bytes": 820, "symbol_errors": 1}}
    msgs = HardwareSampler(None, ib_root=tmp_path).sample("n", 1, {"j": {}})
    assert len(msgs) == 1 and messages.validate_hw(msgs[0])["ib"]["mlx5_0"]["tx_bytes"] == 420


def test_counters_are_published_as_deltas():
    sampler = HardwareSampler(ReplayReader(DATA), ib_root="/nonexistent", threaded=False)
    gpu5, gpu6 = [], []
    for _ in range(30):
        sampler.worker.read_once()
        msgs = [m for m in sampler.sample("n", 1, {"j": {}}) if "gpu" in m]
        gpu5.append(msgs[5])
        gpu6.append(msgs[6])
    assert [m["ecc_dbe"] for m in gpu5] == [0] * 25 + [1] + [0] * 4  # the cumulative count is 1 from 25 on
    assert [m["xid"] for m in gpu5] == [0] * 25 + [48] + [0] * 4
    nvlink = [m["nvlink_errors"] for m in gpu6]
    assert nvlink[0] == 0 and sum(nvlink) == gpu_fields(ReplayReader(DATA).samples[29][6])["nvlink_errors"]
