"""LLVM intrinsics the kernels' numba code shares (numba has no name for them)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


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
