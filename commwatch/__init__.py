"""commwatch: real-time hang and slow-rank detection for distributed GPU training."""
__version__ = "0.1.0"
