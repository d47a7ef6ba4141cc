"""Megatron-LM: read this rank's TP/PP/DP/CP/EP coordinates from megatron.core.parallel_state."""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)

GETTERS = {
    "tp": "get_tensor_model_parallel_rank",
    "pp": "get_pipeline_model_parallel_rank",
    "dp": "get_data_parallel_rank",
    "cp": "get_context_parallel_rank",
    "ep": "get_expert_model_parallel_rank",
}


def coords() -> dict[str, int] | None:
    """The coordinates, or None while Megatron's parallel state is not initialised."""
    try:
        ps = importlib.import_module("megatron.core.parallel_state")
    except ImportError:
        return None
    ready = getattr(ps, "model_parallel_is_initialized", None)
    if ready is not None and not ready():
        return None
    out: dict[str, int] = {}
    for key, name in GETTERS.items():
        getter = getattr(ps, name, None)
        if getter is None:
            continue
        try:
            out[key] = int(getter())
        except Exception as exc:  # a getter whose group was not built (no CP/EP in this run)
            log.debug("megatron %s unavailable: %s", name, exc)
    return out or None
