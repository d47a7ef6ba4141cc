"""Medians along an axis at a fraction of numpy's fixed cost (the detectors take many of
small arrays): `median` without NaN handling, `nanmedian` ignoring NaN."""

from __future__ import annotations

import numpy as np


def median(a: np.ndarray, axis: int) -> np.ndarray:
    """`np.median` along `axis` (no NaN handling)."""
    m = a.shape[axis]
    h = m // 2
    if m % 2:
        return np.partition(a, h, axis=axis).take(h, axis=axis)
    p = np.partition(a, (h - 1, h), axis=axis)
    return (p.take(h - 1, axis=axis) + p.take(h, axis=axis)) / 2


def nanmedian(a: np.ndarray, axis: int) -> np.ndarray:
    """`np.nanmedian` along `axis` (nan where nothing is valid), without masked arrays."""
    srt = np.sort(a, axis=axis)  # nans last
    k = np.isfinite(a).sum(axis=axis, keepdims=True)
    lo = np.take_along_axis(srt, np.maximum((k - 1) // 2, 0), axis=axis)
    hi = np.take_along_axis(srt, np.maximum(k // 2, 0) - (k == 0), axis=axis)
    return np.squeeze(np.where(k > 0, (lo + hi) / 2, np.nan), axis=axis)
