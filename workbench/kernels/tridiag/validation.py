"""Client-side validation of the tridiagonal solver's inputs: one helper per entry point checks every
argument up front (shape, dtype, layout, options) and names the bad one, before anything is sent to the
workers.  :class:`_Spec` is what the rest of the package reads instead of the raw arguments."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...backend import to_host
from ...partition import CHECK_BLOCK, RowBlocks, all_finite, check_int, check_one_per_worker, known_chunks
from .params import _ENGINES, _REDUCED


@dataclass
class _Spec:
    source: str            # "host" | "dask" | "rows"
    n: int
    V: int
    R: int
    batched: bool
    b_ndim: int
    periodic: bool
    reduced: str
    engine: str
    dl: Any = None
    d: Any = None
    du: Any = None
    b: Any = None
    h: float = 1.0
    compact: bool = False
    nax: int = 0           # the line axis of d (and of b, f) for array inputs: 1 = gtsv (batch, n), 0 = (n, ...)


def _kind(x: Any) -> str:
    if isinstance(x, RowBlocks):
        return "rows"
    try:
        import dask.array as da
        if isinstance(x, da.Array):
            return "dask"
    except ImportError:  # pragma: no cover
        pass
    return "host"


def _check_options(periodic: Any, reduced: Any, engine: Any) -> None:
    if not isinstance(periodic, bool | np.bool_):
        raise TypeError(f"periodic must be a bool, got {periodic!r}")
    if reduced not in _REDUCED:
        raise ValueError(f"reduced must be one of {_REDUCED}, got {reduced!r}")
    if engine not in _ENGINES:
        raise ValueError(f"engine must be one of {_ENGINES}, got {engine!r}")


def _as_float(name: str, x: Any, kind: str) -> Any:
    if kind == "rows":
        if x.kind != "dense":
            raise TypeError(f"{name} must be dense RowBlocks, got kind={x.kind!r}")
        dt = np.dtype(x.dtype)
    else:
        if kind == "host":
            try:
                x = np.asarray(to_host(x))
            except ValueError as e:   # a ragged list: numpy's "inhomogeneous shape"
                raise ValueError(f"{name} must be an array of numbers: {e}") from None
        known_chunks(name, x)
        dt = np.dtype(x.dtype)
    if dt.kind == "c":
        raise TypeError(f"{name} is complex; only real systems are supported")
    if dt.kind not in "fiub":
        raise TypeError(f"{name} must be a real numeric array, got dtype {dt}")
    if kind == "host":
        x = np.asarray(x, dtype=np.float64)
        if not all_finite(x):
            raise ValueError(f"{name} has non-finite entries (NaN or inf)")
    return x


def _line_axis(axis: Any, ndim: int, name: str) -> int:
    """The line axis (non-negative) of a 1-D or 2-D ``name`` from scipy-style ``axis``."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -ndim <= int(axis) < ndim:
        raise ValueError(f"axis={axis} is out of range for {name} with {ndim} dimension(s)")
    return int(axis) % ndim


def _validate_system(dl: Any, d: Any, du: Any, b: Any, periodic: Any, reduced: Any, engine: Any,
                     axis: Any = -1) -> _Spec:
    _check_options(periodic, reduced, engine)
    names = ("dl", "d", "du", "b")
    kinds = {_kind(x) for x in (dl, d, du, b)}
    if "rows" in kinds and kinds != {"rows"}:
        raise TypeError("pass dl, d, du and b all as RowBlocks (line-major) or none of them")
    source = "rows" if "rows" in kinds else ("dask" if "dask" in kinds else "host")
    if source == "dask":
        import dask.array as da
        arrs = [da.asarray(np.asarray(x)) if _kind(x) == "host" else x for x in (dl, d, du, b)]
        arrs = [_as_float(nm, x, "dask") for nm, x in zip(names, arrs, strict=True)]
    else:
        arrs = [_as_float(nm, x, source) for nm, x in zip(names, (dl, d, du, b), strict=True)]
    dl, d, du, b = arrs
    if source == "rows":
        return _validate_rows(dl, d, du, b, periodic, reduced, engine)
    if d.ndim not in (1, 2):
        raise ValueError(f"d must be 1-D (n,) or 2-D (batch, n) (axis=0: (n, batch)), got shape {tuple(d.shape)}")
    batched = d.ndim == 2
    nax = _line_axis(axis, d.ndim, "d")
    n = int(d.shape[nax])
    V = int(d.shape[1 - nax]) if batched else 1
    if n < 1:
        raise ValueError("d must have at least one entry")
    if periodic and n < 3:
        raise ValueError(f"periodic systems need n >= 3, got n={n}")
    m_off = n if periodic else n - 1

    def shaped(line: int) -> tuple:  # d's shape with the line axis of length `line`
        return tuple(line if i == nax else int(s) for i, s in enumerate(d.shape))

    for nm, x in (("dl", dl), ("du", du)):
        want = shaped(m_off)
        if tuple(x.shape) != want:
            raise ValueError(f"{nm} must have shape {want} for d of shape {tuple(d.shape)}"
                             f"{' (periodic: length n' if periodic else ' (length n-1'} along axis {axis}), "
                             f"got {tuple(x.shape)}")
    lead = shaped(n)
    if tuple(b.shape[:len(lead)]) != lead or b.ndim not in (len(lead), len(lead) + 1):
        raise ValueError(f"b must have shape {lead} or {lead + ('nrhs',)}, got {tuple(b.shape)}")
    R = int(b.shape[-1]) if b.ndim == len(lead) + 1 else 1
    if R < 1:
        raise ValueError("b has zero right-hand sides")
    if source == "host":
        # the line axis last, as the check reads rows
        _check_zero_rows(*(np.moveaxis(np.asarray(a), nax, -1) if np.ndim(a) > 1 else np.asarray(a)
                           for a in (dl, d, du)), bool(periodic))
    return _Spec(source, n, V, R, batched, b.ndim, bool(periodic), reduced, engine, dl, d, du, b, nax=nax)


def _check_zero_rows(dl: np.ndarray, d: np.ndarray, du: np.ndarray, periodic: bool) -> None:
    """A row of A that is all zero makes the system singular: cheap to see on the client (other
    singular systems show as a zero pivot on the workers).  The line axis is last."""
    n = d.shape[-1]
    rows = max(1, CHECK_BLOCK // n) if d.ndim == 2 else 1
    step = CHECK_BLOCK if d.ndim == 1 else n
    found: list[np.ndarray] = []
    # a row is all zero only where its diagonal entry is: blocks of d, then dl and du at those entries alone
    for r0 in range(0, d.shape[0] if d.ndim == 2 else 1, rows):
        for c0 in range(0, n, step):
            blk = d[r0:r0 + rows, c0:c0 + step] if d.ndim == 2 else d[c0:c0 + step]
            mask = blk == 0
            if not mask.any():
                continue
            hit = np.nonzero(mask)
            r, c = (hit[0] + r0 if d.ndim == 2 else None), hit[-1] + c0
            if periodic:
                found.append(c[(_at(dl, r, c) == 0) & (_at(du, r, c) == 0)])
            elif n == 1:
                found.append(c)
            else:   # row c holds dl[c - 1] (c >= 1) and du[c] (c <= n - 2)
                left = (c == 0) | (_at(dl, r, np.maximum(c - 1, 0)) == 0)
                right = (c == n - 1) | (_at(du, r, np.minimum(c, n - 2)) == 0)
                found.append(c[left & right])
    zero = np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)
    if zero.size:
        raise np.linalg.LinAlgError(f"the system is singular: dl, d and du are all zero in row {int(zero[0])}"
                                    f"{f' (and {zero.size - 1} more)' if zero.size > 1 else ''}")


def _at(a: np.ndarray, r: np.ndarray | None, c: np.ndarray) -> np.ndarray:
    return a[c] if r is None else a[r, c]


def _validate_rows(dl: RowBlocks, d: RowBlocks, du: RowBlocks, b: RowBlocks, periodic: bool, reduced: str,
                   engine: str) -> _Spec:
    for nm, x in (("dl", dl), ("du", du), ("b", b)):
        if not np.array_equal(x.offsets, d.offsets) or list(x.workers) != list(d.workers):
            raise ValueError(f"{nm} must be partitioned like d (same offsets and workers)")
    check_one_per_worker(d, "d: tridiag_solve's RowBlocks")
    if len(d.shape) not in (1, 2):
        raise ValueError(f"line-major d must have shape (n,) or (n, batch), got {d.shape}")
    n = int(d.shape[0])
    V = int(d.shape[1]) if len(d.shape) == 2 else 1
    for nm, x in (("dl", dl), ("du", du)):
        if tuple(x.shape) != tuple(d.shape):
            raise ValueError(f"line-major {nm} must have the shape of d {tuple(d.shape)} "
                             f"(length n, corners in dl[0]/du[n-1]), got {tuple(x.shape)}")
    if periodic and n < 3:
        raise ValueError(f"periodic systems need n >= 3, got n={n}")
    bs = tuple(b.shape)
    if len(d.shape) == 1:
        ok = bs == (n,) or (len(bs) == 2 and bs[0] == n)
        R = bs[1] if len(bs) == 2 else 1
    else:
        ok = bs == (n, V) or (len(bs) == 3 and bs[0] == n and bs[2] == V)
        R = bs[1] if len(bs) == 3 else 1
    if not ok or R < 1:
        raise ValueError(f"line-major b must have shape (n,), (n, nrhs), (n, batch) or (n, nrhs, batch) "
                         f"matching d {tuple(d.shape)}, got {bs}")
    return _Spec("rows", n, V, int(R), len(d.shape) == 2, len(bs), bool(periodic), reduced, engine,
                 dl, d, du, b)


def _validate_compact(f: Any, h: Any, order: Any, periodic: Any, reduced: Any, engine: Any,
                      axis: Any = -1) -> _Spec:
    _check_options(periodic, reduced, engine)
    if check_int("order", order) != 1:
        raise ValueError(f"order must be 1 (the first derivative), got {order!r}")
    # a bool is an int to isinstance, but h=True is a slip, not a spacing of 1
    if isinstance(h, bool | np.bool_) or not isinstance(h, int | float | np.integer | np.floating) \
            or not (math.isfinite(h) and h > 0):
        raise ValueError(f"h must be a positive finite number, got {h!r}")
    kind = _kind(f)
    f = _as_float("f", f, kind)
    nd = len(f.shape)
    if nd not in (1, 2):
        raise ValueError(f"f must be (n,) or (batch, n) (axis=0: (n, batch)), got shape {tuple(f.shape)}")
    nax = 0 if kind == "rows" else _line_axis(axis, nd, "f")
    n, V = int(f.shape[nax]), (int(f.shape[1 - nax]) if nd == 2 else 1)
    if n < 5:
        raise ValueError(f"the compact stencil needs n >= 5 points, got n={n}")
    return _Spec(kind, n, V, 1, nd == 2, nd, bool(periodic), reduced, engine, b=f, h=float(h), compact=True,
                 nax=nax)
