"""Job simulator: a 3D-parallel training job's traffic per the wire contract, with faults.

>>> from commwatch.producers.simulate import JobSpec, simulate, parse_fault
>>> sim = simulate(JobSpec(tp=2, pp=2, dp=2, duration_s=2), [parse_fault("hang:rank=3,at=1s")])
>>> msgs = list(sim.messages())
>>> sim.truth()[0]["kind"], all(a.ts_ns <= b.ts_ns for a, b in zip(msgs, msgs[1:]))
('hang', True)
"""

from commwatch.producers.simulate.schedule import Fault, FaultError, load_schedule, parse_fault
from commwatch.producers.simulate.simulation import Simulation, simulate
from commwatch.producers.simulate.spec import JobSpec

__all__ = ["Fault", "FaultError", "JobSpec", "Simulation", "load_schedule", "parse_fault", "simulate"]
