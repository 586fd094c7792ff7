"""Real datasets that installed packages ship: spatstat point patterns and scikit-learn feature vectors.

Nothing is downloaded.  spatstat's patterns come from the R package
``spatstat.data`` (Debian: ``apt-get install r-cran-spatstat.data``, or
``make setup-r``), read from its files by the pure-Python ``rdata`` reader, so
R itself is not needed.  Binary R packages keep their data in a lazy-load
database (``data/Rdata.rdx`` + ``Rdata.rdb``); source installs may keep one
``.rda`` per dataset; both are read.

Examples
--------
>>> import workbench as wb
>>> bei = wb.data.spatstat_pattern("bei")                     # doctest: +SKIP
>>> bei.points.shape, bei.window                             # doctest: +SKIP
((3604, 2), (0.0, 1000.0, 0.0, 500.0))
>>> X, y = wb.data.digits()
>>> X.shape
(1797, 64)
"""

from __future__ import annotations

import os
import struct
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PointPattern", "spatstat_pattern", "spatstat_names", "spatstat_data_dir", "digits", "SPATSTAT_PATTERNS"]

#: Rectangular, unmarked-or-marked planar patterns used by the notebooks and tests (spatstat.data names).
SPATSTAT_PATTERNS = ("redwood", "japanesepines", "swedishpines", "cells", "finpines", "lansing", "bei")

_R_LIBS = ("/usr/lib/R/site-library", "/usr/local/lib/R/site-library", "/usr/lib/R/library",
           "/usr/local/lib/R/library", "/opt/R/library")


@dataclass
class PointPattern:
    """A planar point pattern in a rectangle.

    Attributes
    ----------
    name : str
    points : ndarray (n, 2), float64
    window : (xmin, xmax, ymin, ymax)
    units : str
        spatstat's unit name, with its multiplier when not 1 (e.g. ``"924 feet"``).
    marks : ndarray (n,) or None
        Vector marks (species for ``lansing``), else None.
    source : str
        Where it was read from.
    """

    name: str
    points: np.ndarray
    window: tuple[float, float, float, float]
    units: str = ""
    marks: np.ndarray | None = None
    source: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.points)

    @property
    def area(self) -> float:
        x0, x1, y0, y1 = self.window
        return (x1 - x0) * (y1 - y0)


def spatstat_data_dir() -> Path | None:
    """The installed ``spatstat.data`` package's ``data`` directory, or None.

    Looks in ``$R_LIBS``, ``$R_LIBS_SITE``, ``$R_LIBS_USER`` and the usual Debian/CRAN library paths.
    """
    libs = []
    for var in ("R_LIBS", "R_LIBS_SITE", "R_LIBS_USER"):
        libs += [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    for lib in (*libs, *_R_LIBS):
        d = Path(lib).expanduser() / "spatstat.data" / "data"
        if d.is_dir():
            return d
    return None


def _require_dir() -> Path:
    d = spatstat_data_dir()
    if d is None:
        raise FileNotFoundError("the R package spatstat.data is not installed (Debian: "
                                "`apt-get install r-cran-spatstat.data`, or `make setup-r`)")
    return d


def _rdata() -> Any:
    try:
        import rdata
    except ImportError as e:  # pragma: no cover - an optional dependency
        raise ImportError("reading spatstat data needs the 'rdata' package (pip install 'workbench[data]')") from e
    return rdata


def _convert(raw: bytes) -> Any:
    rdata = _rdata()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # rdata warns about file names it cannot guess a format from
        return rdata.conversion.convert(rdata.parser.parse_data(raw))


def _lazyload_index(d: Path) -> dict:
    rdata = _rdata()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rdata.conversion.convert(rdata.parser.parse_file(d / "Rdata.rdx"))


def _lazyload_fetch(d: Path, name: str) -> Any:
    """One object of an R lazy-load database (R's ``lazyLoadDBfetch``): 4 bytes of
    big-endian length, then zlib data, or a type byte ('Z' xz, '2' bzip2, '1' zlib, '0' none) and the data."""
    index = _lazyload_index(d)
    if name not in index["variables"]:
        raise ValueError(f"spatstat.data has no dataset {name!r}; known: {', '.join(spatstat_names())}")
    offset, length = (int(v) for v in index["variables"][name])
    with open(d / "Rdata.rdb", "rb") as f:
        f.seek(offset)
        blob = f.read(length)
    size = struct.unpack(">I", blob[:4])[0]
    kind = blob[4:5]
    if kind == b"Z":
        import lzma
        raw = lzma.decompress(blob[5:])
    elif kind == b"2":
        import bz2
        raw = bz2.decompress(blob[5:])
    elif kind == b"1":
        raw = zlib.decompress(blob[5:])
    elif kind == b"0":
        raw = blob[5:]
    else:
        raw = zlib.decompress(blob[4:])
    if len(raw) != size:
        raise ValueError(f"spatstat.data {name!r}: {len(raw)} bytes decompressed, the index says {size}")
    return _convert(raw)


def spatstat_names() -> list[str]:
    """Every dataset name in the installed ``spatstat.data`` (not all are planar point patterns)."""
    d = _require_dir()
    if (d / "Rdata.rdx").is_file():
        return sorted(str(k) for k in _lazyload_index(d)["variables"])
    return sorted(p.stem for p in d.glob("*.rda"))


def _scalar(x: Any) -> Any:
    a = np.asarray(x).ravel()
    return a[0].item() if a.size else None


def spatstat_pattern(name: str) -> PointPattern:
    """Read a planar point pattern (an R ``ppp`` in a rectangle) from spatstat.data.

    Parameters
    ----------
    name : str
        A spatstat.data dataset, e.g. ``"bei"`` (3604 trees, 1000 x 500 m),
        ``"lansing"`` (2251 trees, unit square = 924 ft), ``"redwood"``
        (62 seedlings), ``"swedishpines"``, ``"japanesepines"``, ``"cells"``.

    Returns
    -------
    PointPattern

    Raises
    ------
    FileNotFoundError
        spatstat.data is not installed.
    ValueError
        Unknown name, or not a point pattern in a rectangular window.

    Examples
    --------
    >>> p = spatstat_pattern("redwood")                            # doctest: +SKIP
    >>> p.n, p.window                                              # doctest: +SKIP
    (62, (0.0, 1.0, -1.0, 0.0))
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    d = _require_dir()
    rda = d / f"{name}.rda"
    if rda.is_file():
        env = _convert(rda.read_bytes())   # an .rda holds an environment: {name: object}
        obj = env[name] if isinstance(env, dict) and name in env else env
        source = str(rda)
    else:
        obj = _lazyload_fetch(d, name)
        source = f"{d / 'Rdata.rdb'} [{name}]"
    if not isinstance(obj, dict) or not {"window", "x", "y"} <= set(obj):
        raise ValueError(f"spatstat.data {name!r} is not a planar point pattern (ppp)")
    win = obj["window"]
    if _scalar(win.get("type")) != "rectangle":
        raise ValueError(f"spatstat.data {name!r} has a {_scalar(win.get('type'))!r} window; only rectangles "
                         f"are supported")
    x0, x1 = (float(v) for v in np.asarray(win["xrange"], dtype=np.float64))
    y0, y1 = (float(v) for v in np.asarray(win["yrange"], dtype=np.float64))
    pts = np.column_stack([np.asarray(obj["x"], dtype=np.float64), np.asarray(obj["y"], dtype=np.float64)])
    units = ""
    u = win.get("units")
    if isinstance(u, dict):
        mult = _scalar(u.get("multiplier"))
        plural = _scalar(u.get("plural")) or ""
        units = plural if mult in (None, 1, 1.0) else f"{mult:g} {plural}"
    marks = None
    if _scalar(obj.get("markformat")) == "vector" and "marks" in obj:
        marks = np.asarray(obj["marks"]).astype(str)
    return PointPattern(name=name, points=pts, window=(x0, x1, y0, y1), units=units, marks=marks, source=source)


def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled handwritten digits: 1797 images of 8 x 8 pixels as
    float64 feature vectors (1797, 64) with labels 0-9 (UCI optdigits test set).

    Examples
    --------
    >>> X, y = digits()
    >>> X.shape, sorted(set(y)) == list(range(10))
    ((1797, 64), True)
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - an optional dependency
        raise ImportError("digits() needs scikit-learn (pip install 'workbench[data]')") from e
    d = load_digits()
    return np.ascontiguousarray(d.data, dtype=np.float64), np.asarray(d.target, dtype=np.int64)
