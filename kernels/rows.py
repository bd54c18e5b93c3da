"""Row primitives shared by the kernels.

A *row* is one line of a C-contiguous int64 matrix: a data tuple (key or value columns)
or a time vector. Rows compare lexicographically (column 0 most significant); for time
vectors this order is a linear extension of the product partial order, which is why the
whole engine can keep batches sorted by it and replay times in it.

These helpers are plain ``@njit`` functions meant to be inlined into other kernels; they
have no Python wrappers.
"""
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

#: An int64 zero to pass to a compiled kernel: Numba types a bare ``0`` argument of a
#: call between compiled functions as a literal and compiles the callee once more
#: for it (``tests/test_kernel_literals.py``). A global NumPy integer is typed as
#: a plain int64.
I0 = np.int64(0)

#: Flags to pass where a kernel's callers differ in the flag they pass, for the same
#: reason: a bare ``True``/``False`` is typed as a literal and the callee is compiled
#: once for each (and once more for a computed flag). Where a literal flag is kept on
#: purpose, so that Numba prunes the branch it selects in a hot loop, the kernel is
#: listed in ``tests/test_kernel_literals.py``.
BTRUE = np.bool_(True)
BFALSE = np.bool_(False)


def leaf(fn):
    """Compile a *leaf kernel*: ``@njit(cache=True, nogil=True)`` without reference
    counting (Numba's ``_nrt=False``).

    Numba updates an array's reference count (an atomic add, through a call) whenever
    a function takes an array argument, an inlined helper binds one, or a view is
    made; inside loops its pruning pass removes few of these, and at 1-10 updates per
    key they were a third of a reachability run. A leaf kernel has none. The price:
    a leaf cannot allocate (Numba rejects ``np.empty`` there: take scratch from the
    caller) nor return an array other than an argument (also rejected), and must not
    return an argument array either (the caller would drop a reference it does not
    hold); it calls only other leaves or inlined helpers (an array returned to it by
    a regular kernel would never be released). The arrays it gets are kept alive by its
    caller for the whole call.
    """
    return njit(cache=True, nogil=True, _nrt=False)(fn)


def list_leaf(fn):
    """A :func:`leaf` that takes a typed list (of arrays) and reads it with
    :func:`list_item`. Such a function can only be called from compiled code: a
    Python caller would need Numba's wrapper, which unboxes the list with reference
    counting."""
    return njit(cache=True, nogil=True, _nrt=False, no_cpython_wrapper=True)(fn)


@intrinsic
def list_item(typingctx, lst, i):
    """Item ``i`` of typed list ``lst``, unchecked. In a leaf kernel it is borrowed
    (no reference taken: the list, kept alive by the caller, holds one); elsewhere a
    reference is taken, as for ``lst[i]``. (``getitem_unchecked`` cannot be used in a
    leaf: it is a compiled function returning an array it was not given.)"""
    from numba.typed.typedobjectutils import _container_get_data
    if not (isinstance(lst, types.ListType) and isinstance(i, types.Integer)):
        return None
    ity = lst.item_type
    sig = ity(lst, i)

    def codegen(context, builder, signature, args):
        lv, iv = args
        fnty = ir.FunctionType(cgutils.voidptr_t, [cgutils.voidptr_t])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_list_base_ptr")
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        fn.attributes.add("readonly")
        base = builder.call(fn, [_container_get_data(context, builder,
                                                      signature.args[0], lv)])
        llty = context.get_data_type(ity)
        idx = context.cast(builder, iv, signature.args[1], types.intp)
        ptr = cgutils.gep(builder, builder.bitcast(base, llty.as_pointer()), idx)
        item = context.data_model_manager[ity].load_from_data_pointer(builder, ptr)
        if context.enable_nrt:
            context.nrt.incref(builder, ity, item)
        return item

    return sig, codegen


@intrinsic
def flat_view(typingctx, arr):
    """The C-contiguous 2-D array ``arr`` as a 1-D view of all its items (what
    ``arr.ravel()`` gives, without a call: usable in a leaf, where it takes no
    reference; elsewhere it takes one, as a view does)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.layout == "C"):
        return None
    retty = arr.copy(ndim=1, layout="C")
    sig = retty(arr)

    def codegen(context, builder, signature, args):
        from numba.np.arrayobj import populate_array
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        out = context.make_array(retty)(context, builder)
        rows, cols = cgutils.unpack_tuple(builder, ary.shape, 2)
        item = context.get_constant(types.intp, context.get_abi_sizeof(
            context.get_data_type(aryty.dtype)))
        populate_array(out, data=ary.data, shape=[builder.mul(rows, cols)],
                       strides=[item], itemsize=ary.itemsize, meminfo=ary.meminfo,
                       parent=ary.parent)
        res = out._getvalue()
        if context.enable_nrt:
            context.nrt.incref(builder, retty, res)
        return res

    return sig, codegen


@intrinsic
def prefetch_row(typingctx, arr, r):
    """Hint the CPU to load row ``r`` of the 2-D C array ``arr`` into the cache (LLVM's
    ``prefetch`` for reading; no effect on results, and no fault for any ``r``: the
    address is computed, never dereferenced)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and
            isinstance(r, types.Integer)):
        return None
    sig = types.void(arr, r)

    def codegen(context, builder, signature, args):
        aryty, rty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        row = context.cast(builder, args[1], rty, types.intp)
        stride = cgutils.unpack_tuple(builder, ary.strides, 2)[0]
        base = builder.ptrtoint(ary.data, cgutils.intp_t)
        addr = builder.add(base, builder.mul(row, stride))
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [builder.inttoptr(addr, i8p), ir.Constant(i32, 0),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def move_rows(typingctx, arr, dst, src, n):
    """Copy rows ``src .. src + n - 1`` of the 2-D C array ``arr`` to rows ``dst .. dst
    + n - 1`` (the two ranges may overlap): one ``memmove`` (LLVM's intrinsic), for
    shifting a long run of rows in place. Usable in a leaf (it takes no reference);
    the caller keeps both ranges inside the array."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.layout == "C" and
            all(isinstance(x, types.Integer) for x in (dst, src, n))):
        return None
    sig = types.void(arr, dst, src, n)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        stride = cgutils.unpack_tuple(builder, ary.strides, 2)[0]
        d, s_, k = (context.cast(builder, v, t, types.intp)
                    for v, t in zip(args[1:], signature.args[1:]))
        base = builder.ptrtoint(ary.data, cgutils.intp_t)
        i8p = ir.IntType(8).as_pointer()
        dp = builder.inttoptr(builder.add(base, builder.mul(d, stride)), i8p)
        sp = builder.inttoptr(builder.add(base, builder.mul(s_, stride)), i8p)
        cgutils.raw_memmove(builder, dp, sp, builder.mul(k, stride), 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def row_cmp(a, i, b, j):
    """Compare row ``a[i]`` with row ``b[j]`` lexicographically: -1, 0 or 1."""
    for c in range(a.shape[1]):
        x = a[i, c]
        y = b[j, c]
        if x < y:
            return -1
        if x > y:
            return 1
    return 0


@njit(cache=True, nogil=True, inline="always")
def row_eq(a, i, b, j):
    """True when row ``a[i]`` equals row ``b[j]``."""
    for c in range(a.shape[1]):
        if a[i, c] != b[j, c]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def row_le(a, i, b, j):
    """Product order: every coordinate of ``a[i]`` is <= the same one of ``b[j]``."""
    for c in range(a.shape[1]):
        if a[i, c] > b[j, c]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def add_checked(x, y):
    """Return ``(x + y, overflowed)`` for int64 values without silently wrapping."""
    s = x + y
    # Signed overflow happened iff both operands have the sign opposite to the result.
    return s, ((x ^ s) & (y ^ s)) < 0


@njit(cache=True, nogil=True, inline="always")
def add_counted(s, carry, x):
    """``s + x`` for summing a group of diffs: returns ``(sum mod 2**64, carry)``, the
    carry counting wrap-arounds (+1 up, -1 down) so that the true sum is ``s + carry *
    2**64``. The group's sum is outside int64 only when its final carry is not 0, so a
    partial sum that wraps and comes back does not overflow and the result does not
    depend on the order of summation."""
    s, over = add_checked(s, x)
    if over:
        carry += 1 if x > 0 else -1
    return s, carry


@intrinsic
def _mul_overflow(typingctx, x, y):
    """``(x * y mod 2**64, overflowed)`` for int64 operands: LLVM's
    ``llvm.smul.with.overflow.i64`` (a multiply and a flag test; no division)."""
    if not (isinstance(x, types.Integer) and isinstance(y, types.Integer)):
        return None
    sig = types.Tuple((types.int64, types.boolean))(x, y)

    def codegen(context, builder, signature, args):
        a = context.cast(builder, args[0], signature.args[0], types.int64)
        b = context.cast(builder, args[1], signature.args[1], types.int64)
        res = builder.smul_with_overflow(a, b)
        p = builder.extract_value(res, 0)
        over = builder.extract_value(res, 1)
        return context.make_tuple(builder, signature.return_type, [p, over])

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def mul_checked(x, y):
    """Return ``(x * y, overflowed)`` for int64 values without silently wrapping.

    The test is LLVM's overflow intrinsic: checking ``p // x == y`` after a plain
    multiply is optimised away by LLVM (which assumes signed overflow cannot happen),
    and testing the operands against ``INT64_MAX // y`` first costs a division (tens
    of cycles) per product."""
    return _mul_overflow(np.int64(x), np.int64(y))
