"""LLVM intrinsics the kernels' numba code shares (numba has no name for them)."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload


@intrinsic
def _prefetch(typingctx, arr, i, j):  # pragma: no cover - compiled
    """``llvm.prefetch`` (read, keep in all cache levels) of ``arr[i, j]``."""
    sig = types.void(arr, i, j)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ii = context.cast(builder, args[1], signature.args[1], types.intp)
        jj = context.cast(builder, args[2], signature.args[2], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [ii, jj], wraparound=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        # the intrinsic's name mangles the pointer type: "p0" once LLVM has opaque pointers
        # (llvmlite >= 0.44, which grew this flag), "p0i8" before
        import llvmlite

        name = "llvm.prefetch.p0" if hasattr(llvmlite, "ir_layer_typed_pointers_enabled") else "llvm.prefetch.p0i8"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            name)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _cttz(typingctx, x):  # pragma: no cover - compiled
    """``llvm.cttz`` of a nonzero unsigned 64-bit ``x``: the index of its lowest set bit (int64)."""
    sig = types.int64(x)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]),
                                            "llvm.cttz.i64")
        return builder.call(fn, [args[0], ir.IntType(1)(1)])

    return sig, codegen


@intrinsic
def _stack_empty(typingctx, size, dtype):  # pragma: no cover - compiled
    """A 1-D C array of ``size`` elements (a compile-time constant) on the stack: LLVM knows that nothing
    else points into it, so a fully unrolled loop over it keeps it in registers."""
    if not isinstance(size, types.IntegerLiteral) or not isinstance(dtype, types.DType):
        return None
    n, dt = size.literal_value, dtype.dtype
    arrty = types.Array(dt, 1, "C")
    sig = arrty(size, dtype)

    def codegen(context, builder, signature, args):
        ll = context.get_data_type(dt)
        intp = lambda v: context.get_constant(types.intp, v)  # noqa: E731
        ptr = cgutils.alloca_once(builder, ll, size=intp(n))
        ary = context.make_array(arrty)(context, builder)
        itemsize = context.get_abi_sizeof(ll)
        context.populate_array(ary, data=ptr, shape=[intp(n)], strides=[intp(itemsize)], itemsize=intp(itemsize),
                               meminfo=None)
        return ary._getvalue()

    return sig, codegen


def _row_buffer(n, dtype):  # pragma: no cover - replaced in compiled code
    """A scratch row of ``n`` elements: on the stack for a compile-time ``n`` (:func:`_stack_empty`), else
    ``np.empty``.  Only in numba-compiled code."""
    raise NotImplementedError("_row_buffer is for numba-compiled code")


@overload(_row_buffer, inline="always", prefer_literal=True)
def _row_buffer_impl(n, dtype):  # pragma: no cover - compiled
    if isinstance(n, types.IntegerLiteral):
        return lambda n, dtype: _stack_empty(n, dtype)
    return lambda n, dtype: np.empty(n, dtype)
