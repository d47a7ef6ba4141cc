"""commwatch producers."""
