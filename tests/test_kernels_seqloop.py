"""Row kernels of the sequential loop (kernels/seqloop.py) against Python references:
the in-step consolidation of a round's rows."""
import numpy as np
import pytest

from ddnumba.kernels import seqloop as sl

I64 = np.iinfo(np.int64)


def ref_sum(rows, w):
    """Rows ``(iteration, diff, data[w])`` summed per data, sorted, zeros dropped."""
    acc = {}
    for r in rows:
        key = tuple(int(x) for x in r[2:2 + w])
        acc[key] = acc.get(key, 0) + int(r[1])
    return [(k, d) for k, d in sorted(acc.items()) if d != 0]


def as_pairs(rows, k, w):
    return [(tuple(int(x) for x in r[2:2 + w]), int(r[1])) for r in rows[:k]]


@pytest.mark.parametrize("w", [1, 2, 3])
@pytest.mark.parametrize("spare", [0, 1, 4])
def test_isort_sum_sorts_and_sums_like_the_reference(w, spare):
    """Random rows (few distinct keys or many, negative and extreme values, diffs that
    cancel), with no room after the data or some (holding garbage, which may be used
    as scratch): the rows come back sorted by data, summed, without zeros, at the
    same iteration."""
    rng = np.random.default_rng(1000 * w + spare)
    for trial in range(400):
        n = int(rng.integers(0, 49))
        hi = int(rng.choice([2, 4, 1000, 2 ** 40]))
        rows = np.full((n + spare, w + 2), 99, np.int64)
        rows[:n, 0] = 7
        rows[:n, 1] = rng.integers(-3, 4, n)
        rows[:n, 2:] = rng.integers(-hi, hi, (n, w))
        if n and trial % 5 == 0:
            rows[rng.integers(0, n), 2] = I64.min
            rows[rng.integers(0, n), 2 + w - 1] = I64.max
        if trial % 9 == 0:                   # already sorted, or sorted backwards
            order = np.lexsort(rows[:n, 2:][:, ::-1].T)
            rows[:n] = rows[:n][order[::-1] if trial % 2 else order]
        want = ref_sum(rows[:n], w)
        k = sl._isort_sum(rows, n, w)
        assert as_pairs(rows, k, w) == want
        assert (rows[:k, 0] == 7).all()


def test_isort_sum_reports_an_overflowing_sum():
    rows = np.array([[0, I64.max, 5], [0, 1, 3], [0, 1, 5], [0, 0, 0]], np.int64)
    assert sl._isort_sum(rows, 3, 1) == -1


@pytest.mark.parametrize("n", [0, 1, 30, 48, 49, 200])
def test_consolidate_in_place_either_side_of_the_insertion_sort(n):
    """``_consolidate`` sorts up to 48 rows in place and hands more to
    ``sort_consolidate``: the same answer either way."""
    rng = np.random.default_rng(n)
    rows = np.zeros((n, 4), np.int64)
    rows[:, 0] = 3
    rows[:, 1] = rng.integers(-2, 3, n)
    rows[:, 2:] = rng.integers(0, 6, (n, 2))
    want = ref_sum(rows, 2)
    k = sl._consolidate(rows, n, 2)
    assert as_pairs(rows, k, 2) == want
    assert (rows[:k, 0] == 3).all()


@pytest.mark.parametrize("big", [False, True])
def test_a_grown_buffer_keeps_its_rows_and_gives_the_old_one_back(big):
    """A buffer grown for more rows keeps its first ``keep`` rows; a large one is
    copied in parts, each given back once copied (its whole 2 MiB units then read as
    zeros), so that old and new are not both resident; a small one is left as it was."""
    from ddnumba.kernels.hstate import _move_step
    w = 4
    step = int(_move_step(np.empty((1 << 22, w), np.int64)))
    n = 2 * step + 12_345 if big else 1_000
    buf = np.arange(n * w, dtype=np.int64).reshape(n, w) + 1
    keep = n - 7
    out = sl._grown(buf, keep, n + 1)
    assert out.shape[0] >= n + 1 and out.shape[1] == w
    np.testing.assert_array_equal(out[:keep], (np.arange(keep * w) + 1).reshape(keep, w))
    zero = (buf == 0).mean()
    if big:
        assert zero >= 1 - 2 * 2**21 / buf.nbytes
    else:
        assert zero == 0
    assert np.shares_memory(sl._grown(out, keep, 5), out)    # room enough: the same
