"""kernels.intern against a dictionary: codes in order of first appearance, the
interned bytes, growth of every array across batches, and values that share a hash
(weak hashes given to ``intern_hashed``), where a batch's insertions by hash alone
must be undone and the batch interned comparing bytes."""
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from ddnumba.io.encoding import Interner, _byte_buffers
from ddnumba.kernels import intern as K


def _buffers(values):
    return _byte_buffers(pa.array(values, pa.large_binary()))


def _check_state(state, order):
    """The state holds exactly ``order``'s values, in code order."""
    blob, offs, table, meta = state
    assert meta[0] == len(order)
    assert meta[1] == sum(len(v) for v in order)
    assert [bytes(blob[offs[c]:offs[c + 1]]) for c in range(len(order))] == order
    used = table[:, 0] != 0
    assert sorted((table[used, 0] - 1).tolist()) == list(range(len(order)))
    assert used.sum() * 10 <= 7 * table.shape[0]


def _run(batches, weak=None):
    """Intern ``batches`` (lists of bytes) into one state; with ``weak``, a function
    of the real hashes giving the hashes used. Returns the state and checks every
    batch's codes against a dictionary."""
    blob, offs, table, meta = K.new_state()
    ref, order = {}, []
    for batch in batches:
        data, voffs = _buffers(batch)
        if weak is None:
            codes, blob, offs, table = K.intern(data, voffs, blob, offs, table, meta)
        else:
            hs = weak(K.hashes(data, voffs))
            codes, blob, offs, table = K.intern_hashed(data, voffs, hs, blob, offs,
                                                       table, meta)
        want = []
        for v in batch:
            if v not in ref:
                ref[v] = len(ref)
                order.append(v)
            want.append(ref[v])
        assert codes.tolist() == want
    state = (blob, offs, table, meta)
    _check_state(state, order)
    return state, order


_values = st.binary(max_size=20) | st.sampled_from(
    [b"", b"\x00", b"\x00\x00", b"a", b"a\x00", b"abcdefgh", b"abcdefgh\x00",
     b"abcdefghi", b"abcdefgi", b"x" * 16, b"x" * 17])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_values, max_size=40), max_size=6))
def test_codes_are_first_appearance_order(batches):
    _run(batches)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(_values, max_size=40), max_size=6),
       st.sampled_from([0, 1, 3]))
def test_values_sharing_a_hash_still_get_their_own_codes(batches, mask):
    """Hashes cut to their low bits (all equal with mask 0): nearly every batch that
    meets a known hash with other bytes goes the slow way; codes are the same."""
    _run(batches, weak=lambda h: h & np.uint64(mask))


def test_a_batch_with_a_shared_hash_is_undone_and_redone():
    """Every hash 0: the second batch's new values are first taken for the known
    one (same hash), the check finds it, the batch is undone and interned again."""
    (blob, offs, table, meta), order = _run([[b"a"], [b"b", b"a", b"c", b"b"]],
                                           weak=lambda h: h * np.uint64(0))
    assert order == [b"a", b"b", b"c"]


def test_growth_across_many_batches():
    """From the smallest state to 200,000 values of up to 40 bytes, in batches of
    mixed new and known values: every array grows several times."""
    rng = np.random.default_rng(5)
    pool = [bytes(rng.integers(0, 256, int(rng.integers(0, 41)), dtype=np.uint8))
            for _ in range(200_000)]
    batches = []
    for k in range(20):
        idx = rng.integers(0, 10_000 * (k + 1), 20_000)
        batches.append([pool[i] for i in idx])
    batches.append(pool)
    (blob, offs, table, meta), order = _run(batches)
    assert len(order) == len(set(pool))
    assert table.shape[0] >= 2 ** 18 and blob.shape[0] >= meta[1]


def test_interner_values_made_earlier_stay_valid():
    """An Arrow array from ``values()`` is made over the interner's buffers; values
    interned later (which move the buffers when they grow) leave it unchanged."""
    it = Interner()
    it.intern(pa.array(["a", "bb", "ccc"]))
    early = it.values()
    for k in range(50):
        it.intern(pa.array([f"v{k}-{i}" * (k % 5) for i in range(200)]))
    assert early.to_pylist() == ["a", "bb", "ccc"]
    assert it.values().to_pylist()[:3] == ["a", "bb", "ccc"]
    assert it.lookup([2, 0]).to_pylist() == ["ccc", "a"]


def test_interner_memory_per_value():
    """200,000 distinct 16-byte strings: the bytes and under 80 more per value, all
    counted (allocated sizes, growth slack included)."""
    it = Interner()
    vals = [f"s{i:015d}" for i in range(200_000)]
    for k in range(0, len(vals), 50_000):
        it.intern(pa.array(vals[k:k + 50_000]))
    assert len(it) == 200_000
    assert it.nbytes < 200_000 * (16 + 80)


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.binary()])
def test_interner_sliced_and_chunked_inputs(typ):
    """Arrays with an offset (slices) and chunked arrays read the right bytes."""
    it = Interner(binary=typ == pa.binary())
    mk = (lambda s: s.encode()) if typ == pa.binary() else (lambda s: s)
    base = pa.array([mk(s) for s in ["zero", "one", "two", "three", "four"]], typ)
    assert it.intern(base.slice(2, 2)).tolist() == [0, 1]              # two, three
    ch = pa.chunked_array([base.slice(0, 2), base.slice(3)])
    assert it.intern(ch).tolist() == [2, 3, 1, 4]
    assert it.lookup([0, 1, 2, 3, 4]).to_pylist() == [mk(s) for s in
                                                      ["two", "three", "zero", "one",
                                                       "four"]]


def test_interner_refuses_nulls():
    from ddnumba.io.encoding import NullValueError
    with pytest.raises(NullValueError, match="1 null"):
        Interner().intern(pa.array(["a", None]))
