"""JSON payloads of the simulated agents, formatted directly as compact JSON.

Each function returns the text of exactly the bytes `commwatch.messages.dumps` would give
for the same dict (compact separators, keys in the order written), at a fraction of the cost; a unit
test proves it.
"""

from __future__ import annotations

import json


def jstr(text: str) -> str:
    return json.dumps(text)


def topology(job_json: str, ts_ns: int, rank: int, world: int, node: str, local_rank: int, gpu: str,
             coords: dict[str, int]) -> str:
    c = ",".join(f'"{k}":{v}' for k, v in coords.items())
    return (f'{{"v":1,"job":{job_json},"ts_ns":{ts_ns},"rank":{rank},"world_size":{world},"node":"{node}",'
            f'"local_rank":{local_rank},"gpu":"{gpu}","coords":{{{c}}}}}')


def steps(job_json: str, rank: int, iteration: int, t_start_ns: int, t_end_ns: int, forward_ms: float,
          backward_ms: float, optimizer_ms: float) -> str:
    return (f'{{"v":1,"job":{job_json},"rank":{rank},"iteration":{iteration},"t_start_ns":{t_start_ns},'
            f'"t_end_ns":{t_end_ns},"phases":{{"forward_ms":{forward_ms!r},"backward_ms":{backward_ms!r},'
            f'"optimizer_ms":{optimizer_ms!r}}}}}')


def hw(job_json: str, node: str, ts_ns: int, rank: int, gpu: str, sm_mhz: int, power_w: float, temp_c: int,
       util_pct: int, throttle: int) -> str:
    return (f'{{"v":1,"job":{job_json},"node":"{node}","ts_ns":{ts_ns},"rank":{rank},"gpu":"{gpu}",'
            f'"sm_clock_mhz":{sm_mhz},"mem_clock_mhz":2619,"power_w":{power_w!r},"temp_c":{temp_c},'
            f'"util_pct":{util_pct},"throttle_reasons":{throttle},"ecc_dbe":0,"xid":0,"nvlink_errors":0}}')
