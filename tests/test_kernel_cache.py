"""The kernel package drops Numba caches written for other sources (a kernel's
cached code embeds the kernels it calls, from other files)."""
from pathlib import Path

import ddnumba.kernels as K


def _pkg(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "b.py").write_text("y = 2\n")
    return pkg


def _cached(d, *names):
    for n in names:
        (d / n).write_bytes(b"compiled")


def test_caches_dropped_when_any_source_changes(tmp_path):
    pkg = _pkg(tmp_path)
    cache = pkg / "__pycache__"
    _cached(cache, "a.f-1.py311.nbi", "a.f-1.py311.1.nbc", "keep.pyc")
    # no fingerprint yet: the caches' sources are unknown
    assert K.drop_stale_caches(pkg, [cache]) == 2
    assert sorted(p.name for p in cache.iterdir()) == ["ddnumba-kernels.stamp", "keep.pyc"]
    # written for the current sources: kept
    _cached(cache, "a.f-1.py311.nbi", "b.g-3.py311.1.nbc")
    assert K.drop_stale_caches(pkg, [cache]) == 0
    assert (cache / "b.g-3.py311.1.nbc").exists()
    # a change to the *other* file invalidates a.py's caches too
    (pkg / "b.py").write_text("y = 3\n")
    assert K.drop_stale_caches(pkg, [cache]) == 2
    assert not (cache / "a.f-1.py311.nbi").exists()
    assert K.drop_stale_caches(pkg, [cache]) == 0


def test_fingerprint_follows_contents_and_names(tmp_path):
    pkg = _pkg(tmp_path)
    f0 = K.sources_fingerprint(pkg)
    assert K.sources_fingerprint(pkg) == f0
    (pkg / "c.py").write_text("")
    f1 = K.sources_fingerprint(pkg)
    assert f1 != f0
    (pkg / "c.py").rename(pkg / "d.py")
    assert K.sources_fingerprint(pkg) not in (f0, f1)


def test_numba_cache_locations_are_covered(tmp_path):
    from numba.core import caching
    pkg = _pkg(tmp_path)
    dirs = K.cache_dirs(pkg)
    assert dirs[0] == pkg / "__pycache__"
    # Numba's own locator for a function in pkg/a.py, when it caches out of tree
    sub = caching._CacheLocator.get_suitable_cache_subpath(str(pkg / "a.py"))
    assert any(d.name == sub for d in dirs[1:])
    out = tmp_path / "nc" / sub
    out.mkdir(parents=True)
    _cached(out, "a.f-1.py311.nbi")
    assert K.drop_stale_caches(pkg, [out]) == 1


def test_unwritable_location_is_left_alone(tmp_path):
    pkg = _pkg(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    # a "directory" that cannot be created: no error, nothing dropped
    assert K.drop_stale_caches(pkg, [blocker / "sub"]) == 0


def test_installed_kernels_carry_the_current_fingerprint():
    here = Path(K.__file__).parent
    mark = here / "__pycache__" / "ddnumba-kernels.stamp"
    assert mark.read_text() == K.sources_fingerprint(here)
