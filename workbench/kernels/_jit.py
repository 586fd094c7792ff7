"""numba pieces that several CPU kernels share.

Imported only from inside kernels' compile paths, so ``import workbench``
does not pull in numba.
"""

from __future__ import annotations

from typing import Any

import llvmlite
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# the intrinsic's name mangles the pointer type: "p0" once LLVM has opaque pointers
# (llvmlite >= 0.44, which grew this flag), "p0i8" before
_PREFETCH = "llvm.prefetch.p0" if hasattr(llvmlite, "ir_layer_typed_pointers_enabled") else "llvm.prefetch.p0i8"


@intrinsic
def prefetch(typingctx: Any, arr: Any, flat: Any) -> Any:  # pragma: no cover - compiled
    """``llvm.prefetch`` (read, keep in all cache levels) of element ``flat`` of a C-contiguous array
    (the flat index: ``i * ncols + j`` for a 2-D one).

    For access patterns the hardware prefetcher cannot follow: random rows,
    or short runs at a large stride.  A hint only; callers keep ``flat`` in
    bounds anyway.
    """
    sig = types.void(arr, flat)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        k = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = builder.gep(ary.data, [k])
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            _PREFETCH)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
