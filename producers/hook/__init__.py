"""PyTorch/Megatron hook: torch.distributed calls -> the rank's shared-memory ring.

>>> from commwatch.producers import hook      # doctest: +SKIP
>>> hook.install(megatron=True)               # doctest: +SKIP
>>> for batch in loader:                      # doctest: +SKIP
...     hook.step()
"""

from commwatch.producers.hook.runtime import current, install, phase, set_coords, step, uninstall

__all__ = ["install", "uninstall", "step", "phase", "set_coords", "current"]
