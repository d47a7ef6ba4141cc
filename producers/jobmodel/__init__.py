"""An event-level model of a training job as real probes observe it.

Host threads enqueue each rank's 1F1B program onto an in-order GPU stream; collectives
and send/recv pairs rendezvous; probes (`gpu`, `enqueue`, `blocking`, `heartbeats_only`)
write what they can see; node agents publish it with their own clocks. Built apart from
the detectors, to judge them: see README.md.

>>> from commwatch.producers.jobmodel import JobConfig, HostHang, run_job
>>> run = run_job(JobConfig(tp=2, pp=2, dp=2, duration_s=8, faults=(HostHang(rank=3, at_s=4.0),)))
>>> run.truth[0]["kind"], run.truth[0]["ranks"]
('hang', [3])
"""

from commwatch.producers.jobmodel.faults import (AgentSilent, CommHang, Crash, GpuStuck, HostHang, HostPause,
                                                  JobExit, SlowGpu, SlowHost, SlowLink, SlowNode, StuckCompletion)
from commwatch.producers.jobmodel.layout import Layout
from commwatch.producers.jobmodel.model import JobConfig, JobRun, merge, merge_received, records_of, run_job, write_capture
from commwatch.producers.jobmodel.program import Workload

__all__ = ["AgentSilent", "CommHang", "Crash", "GpuStuck", "HostHang", "HostPause", "JobConfig", "JobExit", "JobRun", "Layout",
           "SlowGpu", "SlowHost", "SlowLink", "SlowNode", "StuckCompletion", "Workload", "merge", "merge_received", "records_of",
           "run_job", "write_capture"]
