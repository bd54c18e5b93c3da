"""Kernels compiled once per value of a flag on purpose (shared by
``test_kernel_literals.py``, which reads the sources, and ``conftest.py``, which
watches what a cold test session compiles).

Numba compiles a kernel once per combination of literal arguments its callers pass (see
``test_kernel_literals.py``). These kernels test their flag once per row in a hot loop,
so each copy has its branch pruned; the flag is kept literal at their call sites.
"""

# (module, kernel) -> why its callers may pass different literals
ALLOWED = {
    ("seqloop", "_join_trace"): "delta_left: the loops' join pairing (_pairs_trace "
                                "under it) per row; compiled in the compile helper",
    ("batch", "_sort_keys"): "use_index: the bucket and LSD passes of the root "
                             "scope's sorts (loads: millions of rows), per row",
    ("sort", "_pack_word"): "use_perm: packing the sort keys, per row",
}

# (module, kernel) -> the allowed kernel whose flag it is handed (so it has a copy per
# value too); the source scan sees these as parameters passed on, a compile as copies
UNDER = {
    ("seqloop", "_pairs_trace"): ("seqloop", "_join_trace"),
    ("sort", "_bucket_sort"): ("batch", "_sort_keys"),
    ("sort", "_lsd_sort"): ("batch", "_sort_keys"),
}


def literal_copies(sigs):
    """``{kernel: {(plain signature, signature)}}`` of compiles (the signature's
    argument types as text, and the same with every literal type made plain) ->
    ``{kernel: [signatures]}`` of the kernels compiled more than once for one plain
    signature, leaving out those in ALLOWED and UNDER (``kernel`` is
    ``ddnumba.kernels.<module>.<name>``)."""
    out = {}
    for kernel, pairs in sigs.items():
        mod, _, name = kernel.rpartition(".")
        key = (mod.rpartition(".")[2], name)
        if key in ALLOWED or key in UNDER:
            continue
        plain = {}
        for p, s in pairs:
            plain.setdefault(p, set()).add(s)
        copies = sorted(s for group in plain.values() if len(group) > 1 for s in group)
        if copies:
            out[kernel] = copies
    return out
