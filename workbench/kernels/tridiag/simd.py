"""The tridiagonal kernels' explicit vector code: llvmlite intrinsics numba inlines into ``cpu``'s loops.

Eight doubles per operation (AVX-512 here; LLVM splits them where vectors are narrower), in the scalar
code's order and without contraction, so they give the scalar code's bits; 4 x 4 transposes for the
(batch, n) layout's panels.  Numba has no shuffles or explicit vectors of its own, and
LLVM's vectorizer guards loops over many rows with run-time overlap checks.  Numba keys its on-disk cache
on the calling module's file: after an edit here, touch ``cpu.py`` (or clear ``__pycache__``).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _lanes(context, builder, signature, args, width):
    # codegen helpers of the intrinsics: at(k, row, col) points `width` doubles at row `row`, column `col` of
    # argument k (a 2-D array with unit inner stride; a 1-D one takes row=None)
    i64 = ir.IntType(64)
    vec = ir.VectorType(ir.DoubleType(), width)
    arrays = {}

    def at(k, row, col):
        if k not in arrays:
            arrays[k] = context.make_array(signature.args[k])(context, builder, args[k])
        a = arrays[k]
        off = builder.mul(col, ir.Constant(i64, 8))
        if row is not None:
            off = builder.add(off, builder.mul(row, cgutils.unpack_tuple(builder, a.strides, 2)[0]))
        return builder.inttoptr(builder.add(builder.ptrtoint(a.data, i64), off), vec.as_pointer())

    def ld(ptr):
        return builder.load(ptr, align=8)

    def st(val, ptr):
        builder.store(val, ptr, align=8)

    return vec, at, ld, st


def _transpose4_codegen(streaming):
    def codegen(context, builder, signature, args):
        _, at, ld, _ = _lanes(context, builder, signature, args, 4)
        i32x4 = ir.VectorType(ir.IntType(32), 4)

        def row(r, k):
            return builder.add(r, ir.Constant(ir.IntType(64), k))

        def shuf(a, b, m):
            return builder.shuffle_vector(a, b, ir.Constant(i32x4, m))

        a0, a1, a2, a3 = (ld(at(0, row(args[1], k), args[2])) for k in range(4))
        t0, t1 = shuf(a0, a1, [0, 4, 2, 6]), shuf(a0, a1, [1, 5, 3, 7])
        t2, t3 = shuf(a2, a3, [0, 4, 2, 6]), shuf(a2, a3, [1, 5, 3, 7])
        out = (shuf(t0, t2, [0, 1, 4, 5]), shuf(t1, t3, [0, 1, 4, 5]), shuf(t0, t2, [2, 3, 6, 7]),
               shuf(t1, t3, [2, 3, 6, 7]))
        for k in range(4):
            ptr = at(3, row(args[4], k), args[5])
            if streaming:
                st = builder.store(out[k], ptr, align=32)
                st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
            else:
                builder.store(out[k], ptr, align=8)
        return context.get_dummy_value()

    return codegen


@intrinsic
def _transpose4(typingctx, src, v, j, dst, i, c):
    # dst[i + r, c + q] = src[v + q, j + r] for q, r < 4: four 32-byte loads, two rounds of shuffles, four
    # 32-byte stores (numba has no shuffles of its own; LLVM's vectorizer turns the scalar version into
    # sixteen scalar moves).  Both arrays' rows must be contiguous (unit inner stride).
    return types.void(src, types.intp, types.intp, dst, types.intp, types.intp), _transpose4_codegen(False)


@intrinsic
def _transpose4_nt(typingctx, src, v, j, dst, i, c):
    # _transpose4 with streaming stores, for dst rows at 32-byte boundaries: the answers go to memory
    # without their lines being read in first (a sixth of the pass's traffic) or evicting the panel
    return types.void(src, types.intp, types.intp, dst, types.intp, types.intp), _transpose4_codegen(True)


@intrinsic
def _store_fence(typingctx):
    # orders streaming stores before the stores and loads after it (x then goes to other threads)
    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


def _eliminate2_x8_codegen(with_v):
    def codegen(context, builder, signature, args):
        f64x8, at, ld, st = _lanes(context, builder, signature, args, 8)
        c, v, i, jr = args[:4]
        one_ = ir.Constant(ir.IntType(64), 1)
        i1, jr1 = builder.add(i, one_), builder.add(jr, one_)
        zero = ir.Constant(f64x8, [0.0] * 8)
        one = ir.Constant(f64x8, [1.0] * 8)

        def step(row, cprev, bprev):
            a, d_, c_, b_ = (ld(at(k, row, c)) for k in range(4, 8))
            piv = builder.fsub(d_, builder.fmul(a, cprev))
            inv = builder.fdiv(one, piv)
            c1 = builder.fmul(c_, inv)
            b1 = builder.fmul(builder.fsub(b_, builder.fmul(a, bprev)), inv)
            return a, inv, c1, b1, builder.fadd(b1, builder.fmul(zero, builder.fadd(piv, c1)))

        a0, inv0, cc, bb, xs = step(i, ld(at(10, None, v)), ld(at(11, None, v)))
        st(xs, at(8, i, c))
        st(cc, at(9, jr, v))
        a1, inv1, cc, bb, xs = step(i1, cc, bb)
        st(xs, at(8, i1, c))
        st(cc, at(9, jr1, v))
        st(cc, at(10, None, v))
        st(bb, at(11, None, v))
        if with_v:
            # v' (x_prev's column) of the block's first rows: w = (-a * w_prev) * (1 / pivot), row by row
            j = args[13]
            w0 = builder.fmul(builder.fmul(builder.fneg(a0), ld(at(14, None, v))), inv0)
            w1 = builder.fmul(builder.fmul(builder.fneg(a1), w0), inv1)
            st(w0, at(12, j, v))
            st(w1, at(12, builder.add(j, one_), v))
            st(w1, at(14, None, v))
        return context.get_dummy_value()

    return codegen


@intrinsic
def _eliminate2_x8(typingctx, c, v, i, jr, dl, d, du, b, x, rc, cp, bp):
    # _eliminate2 for systems v..v+7 (columns c..c+7 of the inputs and x) as explicit 8-wide vector code: the
    # same operations in the same order (no contraction), so the same bits.  LLVM's vectorizer, given the
    # scalar loop, guards it with run-time overlap checks of its fourteen rows (~80 compares per row pair, as
    # much as the pair's arithmetic over 64 systems); explicit vector loads and stores need none.
    sig = types.void(types.intp, types.intp, types.intp, types.intp, dl, d, du, b, x, rc, cp, bp)
    return sig, _eliminate2_x8_codegen(False)


@intrinsic
def _eliminate2v_x8(typingctx, c, v, i, jr, dl, d, du, b, x, rc, cp, bp, vs, j, vp):
    # _eliminate2_x8 for a block's first H rows: also v' into rows j, j + 1 of vs and vp
    sig = types.void(types.intp, types.intp, types.intp, types.intp, dl, d, du, b, x, rc, cp, bp, vs, types.intp, vp)
    return sig, _eliminate2_x8_codegen(True)


@intrinsic
def _backsub2_x8(typingctx, c, v, i, ja, jb, x, rc, xn):
    # two rows (i, i - 1; the ring's ja, jb) of a window's back-substitution for systems v..v+7 (columns c..c+7
    # of x), as explicit vector code in the scalar loop's order (the same bits)
    sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, x, rc, xn)

    def codegen(context, builder, signature, args):
        f64x8, at, ld, st = _lanes(context, builder, signature, args, 8)
        c, v, i, ja, jb = args[:5]
        im = builder.sub(i, ir.Constant(ir.IntType(64), 1))
        ya = builder.fsub(ld(at(5, i, c)), builder.fmul(ld(at(6, ja, v)), ld(at(7, None, v))))
        st(ya, at(5, i, c))
        yb = builder.fsub(ld(at(5, im, c)), builder.fmul(ld(at(6, jb, v)), ya))
        st(yb, at(5, im, c))
        st(yb, at(7, None, v))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _halo2_x8(typingctx, c, v, i, ja, jb, x, rc, xn, pp):
    # two rows of the halo's back-substitution for systems v..v+7 (x is read, not written; pp gathers the
    # dropped term's factors), as explicit vector code in the scalar loop's order
    sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, x, rc, xn, pp)

    def codegen(context, builder, signature, args):
        f64x8, at, ld, st = _lanes(context, builder, signature, args, 8)
        fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f64x8, [f64x8]), "llvm.fabs.v8f64")
        c, v, i, ja, jb = args[:5]
        im = builder.sub(i, ir.Constant(ir.IntType(64), 1))
        ca, cb = ld(at(6, ja, v)), ld(at(6, jb, v))
        inner = builder.fsub(ld(at(5, i, c)), builder.fmul(ca, ld(at(7, None, v))))
        st(builder.fsub(ld(at(5, im, c)), builder.fmul(cb, inner)), at(7, None, v))
        prod = builder.fmul(builder.call(fabs, [ca]), builder.call(fabs, [cb]))
        st(builder.fmul(ld(at(8, None, v)), prod), at(8, None, v))
        return context.get_dummy_value()

    return sig, codegen
