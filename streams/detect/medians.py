"""Medians along an axis at a fraction of numpy's fixed cost (the detectors take many of
small arrays): `median` without NaN handling, `nanmedian` ignoring NaN, `others_median` per
member the median of the others."""

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
    """`np.nanmedian` along `axis` (nan where nothing is valid), without masked arrays. Like
    the detectors' arrays most often, all finite: `median` (a partition, not a sort)."""
    if a.dtype.kind == "f" and a.shape[axis] and np.isfinite(a).all():
        return median(a, axis)
    srt = np.sort(a, axis=axis)  # nans last
    k = np.isfinite(a).sum(axis=axis, keepdims=True)
    lo = np.take_along_axis(srt, np.maximum((k - 1) // 2, 0), axis=axis)
    hi = np.take_along_axis(srt, np.maximum(k // 2, 0) - (k == 0), axis=axis)
    return np.squeeze(np.where(k > 0, (lo + hi) / 2, np.nan), axis=axis)


EXACT_OTHERS = 8  # groups up to this size compare a member with the median of the others exactly
# the expected range of k draws of a normal distribution, in standard deviations (k = 2 .. 8; the
# first two entries stand for k < 2): a range over a few windows read as a spread
RANGE_SIGMAS = np.array([1.0, 1.0, 1.128, 1.693, 2.059, 2.326, 2.534, 2.704, 2.847])


def others_median(a: np.ndarray) -> np.ndarray:
    """For each member of `a` (... x members x columns), the median of the other members, per
    column, ignoring nan (nan where none). Exact for small groups; for larger ones, where one
    member moves the median by little, the median of all. Leading axes are separate groups."""
    n = a.shape[-2]
    if n > EXACT_OTHERS:
        return np.broadcast_to(np.expand_dims(nanmedian(a, -2), -2), a.shape).copy()
    if n < 2:
        return np.full(a.shape, np.nan)
    return nanmedian(a[..., OTHERS[n], :], -2)


# per group size n: for each member, the indices of the others (n x (n - 1))
OTHERS = {n: np.array([[j for j in range(n) if j != i] for i in range(n)]) for n in range(2, EXACT_OTHERS + 1)}
