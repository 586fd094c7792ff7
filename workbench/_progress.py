"""Progress bars every layer may use (notebook-aware tqdm), kept apart from the
benchmark harness so the lower layers need not import it."""

from __future__ import annotations

from typing import Any

__all__ = ["progress"]


def progress(iterable: Any, desc: str = "", total: int | None = None, **kw: Any) -> Any:
    """A tqdm progress bar (notebook-aware) over ``iterable``; the iterable itself without tqdm.

    Examples
    --------
    >>> list(progress(range(3), desc="steps", disable=True))
    [0, 1, 2]
    """
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return iterable
    return tqdm(iterable, desc=desc, total=total, **kw)
