"""Join kernels: the per-key cross product of two update histories.

For one key, every pair of updates ``(a at ta, diff da)`` and ``(b at tb, diff db)``
produces an output update at ``ta ∨ tb`` (coordinate max) with diff ``da * db``. The
inputs come as CSR arrays over a common list of keys: ``left_offs[q+1]`` splits the left
updates by key, ``right_offs[q+1]`` the right ones. The kernel returns, per output
update, the indices of the left and right update it came from, so the caller gathers
value columns with NumPy fancy indexing (no per-row Python).
"""
import numpy as np
from numba import njit

from .rows import mul_checked

__all__ = ["cross"]


@njit(cache=True, nogil=True)
def _cross_count(left_offs, right_offs):
    total = 0
    for q in range(len(left_offs) - 1):
        total += (left_offs[q + 1] - left_offs[q]) * (right_offs[q + 1] - right_offs[q])
    return total


@njit(cache=True, nogil=True)
def _cross_fill(left_offs, left_times, left_diffs, right_offs, right_times, right_diffs,
                out_left, out_right, out_times, out_diffs):
    d = left_times.shape[1]
    o = 0
    for q in range(len(left_offs) - 1):
        for i in range(left_offs[q], left_offs[q + 1]):
            da = left_diffs[i]
            for j in range(right_offs[q], right_offs[q + 1]):
                p, over = mul_checked(da, right_diffs[j])
                if over:
                    return o, True
                out_left[o] = i
                out_right[o] = j
                for c in range(d):
                    x = left_times[i, c]
                    y = right_times[j, c]
                    out_times[o, c] = x if x > y else y
                out_diffs[o] = p
                o += 1
    return o, False


def cross(left_offs, left_times, left_diffs, right_offs, right_times, right_diffs):
    """Per-key cross product of two CSR update histories.

    Parameters
    ----------
    left_offs, right_offs : int64[q + 1]
        Offsets splitting each side's updates by key (same key list on both sides).
    left_times, right_times : int64[n, d]
    left_diffs, right_diffs : int64[n]

    Returns
    -------
    left_idx, right_idx : int64[m]
        For each output update, the left and right update it pairs.
    times : int64[m, d]
        ``left_times[left_idx] ∨ right_times[right_idx]``.
    diffs : int64[m]
        ``left_diffs[left_idx] * right_diffs[right_idx]`` (``OverflowError`` on overflow).

    Output is grouped by key (in key order), not consolidated.
    """
    left_offs = np.ascontiguousarray(left_offs, dtype=np.int64)
    right_offs = np.ascontiguousarray(right_offs, dtype=np.int64)
    if left_offs.shape != right_offs.shape:
        raise ValueError(f"cross: left_offs {left_offs.shape} and right_offs "
                         f"{right_offs.shape} must describe the same keys")
    left_times = np.ascontiguousarray(left_times, dtype=np.int64)
    right_times = np.ascontiguousarray(right_times, dtype=np.int64)
    if left_times.shape[1] != right_times.shape[1]:
        raise ValueError("cross: left and right times have different dimensions")
    left_diffs = np.ascontiguousarray(left_diffs, dtype=np.int64)
    right_diffs = np.ascontiguousarray(right_diffs, dtype=np.int64)
    m = _cross_count(left_offs, right_offs)
    out_left = np.empty(m, np.int64)
    out_right = np.empty(m, np.int64)
    out_times = np.empty((m, left_times.shape[1]), np.int64)
    out_diffs = np.empty(m, np.int64)
    n, over = _cross_fill(left_offs, left_times, left_diffs, right_offs, right_times,
                          right_diffs, out_left, out_right, out_times, out_diffs)
    if over:
        raise OverflowError("join: the product of two diffs overflows int64")
    return out_left, out_right, out_times, out_diffs
