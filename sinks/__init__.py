"""commwatch sinks."""
