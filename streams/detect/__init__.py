"""The detector core: stage 1 per communicator, stage 2 per job, both in `Detector`.

Pure Python, numpy and river; no faust or Kafka. Time is event time only.
"""

from commwatch.streams.detect.comm_stage import CommStage
from commwatch.streams.detect.detector import Detector
from commwatch.streams.detect.job_stage import JobStage

__all__ = ["CommStage", "JobStage", "Detector"]
