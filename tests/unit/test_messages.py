import pytest

from commwatch import messages, topics
from commwatch.capture import Message
from commwatch.decode import CallBatch, decode_message
from commwatch.wire import WireError, empty, encode_batch, KIND_CALL

PROGRESS = {"v": 1, "job": "j42", "node": "node-07", "ts_ns": 1767225600000000000, "comm": "9f2c4d1e00a1b2c3",
            "ranks": [{"rank": 56, "started": 1833, "completed": 1832,
                       "t_last_start_ns": 1767225599990000000, "t_last_end_ns": 1767225599980000000}]}
TOPOLOGY = {"v": 1, "job": "j42", "ts_ns": 1767225600000000000, "rank": 56, "world_size": 1024,
            "node": "node-07", "local_rank": 0, "gpu": "GPU-3b1f", "coords": {"tp": 0, "pp": 3, "dp": 1}}
STEPS = {"v": 1, "job": "j42", "rank": 56, "iteration": 1200, "t_start_ns": 1767225600000000000,
         "t_end_ns": 1767225601200000000, "phases": {"forward_ms": 410.2}}
HW = {"v": 1, "job": "j42", "node": "node-07", "ts_ns": 1767225600000000000, "rank": 56, "sm_clock_mhz": 1980,
      "power_w": 612.5, "ib": {"mlx5_0": {"tx_bytes": 0, "rx_bytes": 0, "symbol_errors": 0}}}
INCIDENT = {"v": 1, "job": "j42", "incident": "j42-hang-9f2c4d1e00a1b2c3-1833", "kind": "hang", "severity": "P0",
            "status": "open", "ts_ns": 1767225612000000000, "opened_ns": 1767225612000000000,
            "culprit_ranks": [17], "culprit_nodes": ["node-02"], "comm": "9f2c4d1e00a1b2c3",
            "summary": "x", "evidence": {}}


@pytest.mark.parametrize("topic,msg", [(topics.PROGRESS, PROGRESS), (topics.TOPOLOGY, TOPOLOGY),
                                       (topics.STEPS, STEPS), (topics.HW, HW), (topics.ALERTS, INCIDENT)])
def test_contract_examples_validate(topic, msg):
    assert messages.decode(topic, messages.dumps(msg)) == msg


@pytest.mark.parametrize(
    "topic,msg,fragment",
    [
        (topics.PROGRESS, {**PROGRESS, "ranks": [{"rank": 1}]}, "started is missing"),
        (topics.PROGRESS, {**PROGRESS, "ts_ns": "soon"}, "progress.ts_ns"),
        (topics.TOPOLOGY, {**TOPOLOGY, "rank": 5000}, "outside world_size"),
        (topics.STEPS, {**STEPS, "iteration": 1.5}, "steps.iteration"),
        (topics.STEPS, {**STEPS, "t_end_ns": 1}, "before t_start_ns"),
        (topics.HW, {**HW, "ts_ns": -5}, "negative or far"),
        (topics.ALERTS, {**INCIDENT, "severity": "P9"}, "P0..P3"),
        (topics.STEPS, {**STEPS, "v": 2}, "version"),
    ],
)
def test_bad_fields_are_named(topic, msg, fragment):
    with pytest.raises(WireError, match=fragment):
        messages.decode(topic, messages.dumps(msg))


def test_not_object_nan_and_garbage():
    with pytest.raises(WireError, match="not a JSON object"):
        messages.decode(topics.STEPS, b"[1,2]")
    with pytest.raises(WireError, match="NaN"):
        messages.decode(topics.HW, b'{"v":1,"job":"j","node":"n","ts_ns":1,"power_w":NaN}')
    with pytest.raises(WireError, match="bad_json"):
        messages.decode(topics.STEPS, b"\xff\xfe")


def test_decode_message_checks_keys():
    recs = empty(1)
    recs["kind"] = KIND_CALL
    recs["comm"] = 0xAB
    out = decode_message(Message(topics.CALLS, "j1/00000000000000ab", 1, encode_batch(recs)))
    assert isinstance(out, CallBatch) and out.job == "j1" and out.comm == 0xAB
    with pytest.raises(WireError, match="bad_key"):
        decode_message(Message(topics.CALLS, "nokey", 1, encode_batch(recs)))
    with pytest.raises(WireError, match="comm_mismatch"):
        decode_message(Message(topics.PROGRESS, "j42/00000000000000ab", 1, messages.dumps(PROGRESS)))
    with pytest.raises(WireError, match="job_mismatch"):
        decode_message(Message(topics.STEPS, "other", 1, messages.dumps(STEPS)))
    with pytest.raises(WireError, match="oversized"):
        decode_message(Message(topics.STEPS, "j42", 1, messages.dumps(STEPS)), max_bytes=10)
