"""`JobSpec`: the simulated job's shape, timing and realism knobs."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# 2026-01-01T00:00:00Z, so simulated runs are reproducible byte for byte
DEFAULT_START_NS = 1_767_225_600_000_000_000


@dataclass(frozen=True)
class JobSpec:
    """A training job of ``tp*pp*dp*cp`` ranks (EP groups live inside DP, as in Megatron).

    Times are seconds of simulated time; ``start_ns`` is the true (reference) time of t = 0.
    ``step_s`` is the healthy iteration time; ``tp_calls`` the TP collectives per microbatch
    forward (and again per backward); ``gc_blip_rate`` natural single-rank pauses per rank per
    second; node clocks are offset by up to +-``clock_skew_ms`` and drift up to
    +-``clock_drift_ppm``; node agents flush a calls batch per comm every ``batch_s``.
    """

    job: str = "sim"
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    gpus_per_node: int = 8
    duration_s: float = 60.0
    step_s: float = 1.0
    microbatches: int = 4
    tp_calls: int = 16
    seed: int = 0
    start_ns: int = DEFAULT_START_NS
    heartbeat_s: float = 1.0
    hw_period_s: float = 1.0
    checkpoint_every_s: float = 0.0
    checkpoint_s: float = 20.0
    jitter: float = 0.02
    gc_blip_rate: float = 0.001
    clock_skew_ms: float = 20.0
    clock_drift_ppm: float = 20.0
    batch_s: float = 0.1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "ep", "gpus_per_node", "microbatches", "tp_calls"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("duration_s", "step_s", "heartbeat_s", "hw_period_s", "batch_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("checkpoint_every_s", "checkpoint_s", "jitter", "gc_blip_rate", "clock_skew_ms",
                     "clock_drift_ppm"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.dp % self.ep:
            raise ValueError(f"ep ({self.ep}) must divide dp ({self.dp})")
        if not self.job or "/" in self.job:
            raise ValueError(f"job {self.job!r} must be non-empty and hold no '/'")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def to_dict(self) -> dict:
        return asdict(self)
