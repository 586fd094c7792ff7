"""Tiny helper to write a notebook from (kind, source) cells, outputs empty.

Usage from a script: ``write_notebook(path, [("md", "# Title"), ("params", "x = 1"), ("code", "...")])``.
Source notebooks are committed without outputs so they stay diffable.
"""

from __future__ import annotations

import sys

import nbformat


def write_notebook(path: str, cells: list[tuple[str, str]]) -> None:
    nb = nbformat.v4.new_notebook()
    # the kernel `make setup` installs from the venv; JupyterLab and papermill open the notebook on it
    nb.metadata["kernelspec"] = {"name": "workbench", "display_name": "Python (workbench)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, src in cells:
        src = src.strip("\n")
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(src))
        else:
            c = nbformat.v4.new_code_cell(src)
            if kind == "params":
                c.metadata["tags"] = ["parameters"]
            nb.cells.append(c)
    for i, c in enumerate(nb.cells):
        c["id"] = f"cell-{i}"
    nbformat.validate(nb)
    nbformat.write(nb, path)


if __name__ == "__main__":
    print(__doc__, file=sys.stderr)
