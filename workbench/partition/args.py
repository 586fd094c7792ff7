"""Argument checks every public function shares, so each says the same thing about the same mistake:
``check_int`` refuses a bool or a float where an int counts something (``True`` or ``1.5`` ran as 1),
``check_bool`` a string where a flag is wanted (``"no"`` ran as true); ``as_array`` takes what numpy takes
(a list, a pandas frame) where an array is wanted.

Examples
--------
>>> check_int("n_roots", 8, low=1)
8
>>> check_bool("validate", "no")
Traceback (most recent call last):
    ...
TypeError: validate must be a bool, got str 'no'
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_int", "check_bool", "as_array", "refuse_dask_collection"]


def check_int(name: str, value: Any, *, low: int | None = None) -> int:
    """``value`` as an int: a ``TypeError`` naming ``name`` for a bool, float or other non-int, a
    ``ValueError`` below ``low``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")
    return int(value)


def as_array(name: str, value: Any) -> Any:
    """Lists, tuples and array-likes without ``shape`` and ``dtype`` (a pandas DataFrame) as numpy arrays, as
    numpy functions take them; arrays (numpy, cupy, sparse, dask) and distributed containers as they are.

    Examples
    --------
    >>> as_array("X", [[0.0, 1.0], [2.0, 3.0]]).shape
    (2, 2)
    >>> as_array("X", [[0.0], [1.0, 2.0]])
    Traceback (most recent call last):
        ...
    ValueError: X is a ragged list (rows of different lengths)
    """
    if hasattr(value, "dask"):      # a dask collection: np.asarray would compute it here, in the client
        refuse_dask_collection(name, value)
        return value
    if isinstance(value, list | tuple) or (hasattr(value, "__array__") and not (hasattr(value, "shape")
                                                                             and hasattr(value, "dtype"))):
        try:
            arr = np.asarray(value)
        except ValueError:            # numpy's "inhomogeneous shape"
            raise ValueError(f"{name} is a ragged {type(value).__name__} (rows of different lengths)") from None
        if arr.dtype == object:
            raise TypeError(f"{name} must be an array of numbers, got a {type(value).__name__} of objects")
        return arr
    return value


def refuse_dask_collection(name: str, value: Any) -> None:
    """A ``TypeError`` naming ``name`` for a dask collection that is not a dask array (a dask DataFrame): the
    kernels read arrays' chunks where they lie, and np.asarray would compute the whole of it in the client."""
    if hasattr(value, "dask") and not hasattr(value, "chunks"):
        raise TypeError(f"{name} must be an array or a dask array, got a {type(value).__name__} (a dask "
                        "DataFrame gives its array with .to_dask_array(lengths=True))")


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a bool: a ``TypeError`` naming ``name`` for anything else (a string is true)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)
