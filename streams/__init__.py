"""commwatch streams."""
