"""Node agent: per-rank rings, progress heartbeats, topology, steps and hardware -> Kafka."""
