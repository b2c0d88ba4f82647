"""Strip the workshop notebooks for the repository: no outputs, execution counts or widget state.

``make strip-notebooks`` runs it on every notebook of the repository; ``--check`` only lists the
notebooks that are not stripped (exit status 1 if there is one). Cell tags and other cell
metadata stay: the tests read them (``raises-exception``, ``hand-written``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
SKIP = {".venv", ".git", "build", "test-artifacts", ".ipynb_checkpoints", "node_modules"}
RUN_METADATA = ("execution", "collapsed", "scrolled")  # written by Jupyter and nbclient


def repository_notebooks() -> list[Path]:
    return sorted(
        path
        for path in REPO.rglob("*.ipynb")
        if not SKIP.intersection(path.relative_to(REPO).parts)
    )


def strip(nb: nbformat.NotebookNode) -> bool:
    """Strip `nb` in place; whether anything changed."""
    changed = nb.metadata.pop("widgets", None) is not None
    language = nb.metadata.get("language_info")
    if language and set(language) != {"name"}:  # a kernel fills in its versions when it runs
        nb.metadata["language_info"] = {"name": language.get("name", "python")}
        changed = True
    for cell in nb.cells:
        for key in RUN_METADATA:
            changed |= cell.metadata.pop(key, None) is not None
        if cell.cell_type != "code":
            continue
        if cell.outputs or cell.execution_count is not None:
            cell.outputs = []
            cell.execution_count = None
            changed = True
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: all of the repo)")
    parser.add_argument("--check", action="store_true", help="only list unstripped notebooks")
    args = parser.parse_args(argv)
    dirty = []
    for path in args.paths or repository_notebooks():
        nb = nbformat.read(path, as_version=4)
        if strip(nb):
            dirty.append(path)
            if not args.check:
                nbformat.write(nb, path)
    verb = "not stripped" if args.check else "stripped"
    for path in dirty:
        print(f"{verb}: {path}")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())
