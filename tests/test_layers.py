"""The package's layers point one way, read from the import graph of its source.

    foundation → capture → analysis → result → views → front

A module may import its own layer and the layers below it, never one above (imports inside
functions and under ``TYPE_CHECKING`` count too: a lazy import is still a dependency). No
module imports another module's private (``_name``) name, and nothing walks the stack
(``sys._getframe``). The README's Development section shows the same map.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tfdiag_magic"

# Module prefixes (dotted, under tfdiag_magic) and their layers; the longest prefix decides.
LAYERS: dict[str, tuple[str, ...]] = {
    # Plain data and helpers that know nothing of a run.
    "foundation": (
        "record",
        "units",
        "fit_epochs",
        "early_environment",
        "findings",
        "config",
        "files",
        "tf_runtime",
        "examples",
        "probes.patching",
        "probes.inputs",
        "experiments.sweep_spec",
        "experiments.override",
    ),
    # What runs with the user's code and writes the record.
    "capture": (
        "recorder",
        "probes",
        "stats",
        "instrument",
        "instrument_conversions",
        "markers",
        "active",
        "code_runner",
        "nvml",
        "gpu",
    ),
    # Pure functions of a record: findings, rewrites of the cell, comparisons, the JSON report.
    # Also a record's exports, and a multi-worker job's reports read back and diagnosed.
    "analysis": (
        "diagnose",
        "rewrite",
        "experiments",
        "report",
        "timeline",
        "export",
        "jobs",
        "xplane",
        "ops_summary",
        "phase_split",
    ),
    # A run from start to result.
    "result": ("result", "session"),
    # What the user sees.
    "views": ("views", "gpu.render", "gpu.report", "jobs.merged"),
    # Entry points: the extension, the magics, the command line.
    "front": ("", "magics", "cli", "gpu.magic", "__main__", "jobs.local"),
}
ORDER = list(LAYERS)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str:
    best, best_length = "", -1
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".") or prefix == ""
            if matches and len(prefix) > best_length:
                best, best_length = layer, len(prefix)
    return best


def imports_of(module: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every import of the package's own
    modules in `module`, wherever it stands in the file."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("tfdiag_magic"):
                target = node.module.removeprefix("tfdiag_magic").lstrip(".")
            else:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}" if target else alias.name
                if submodule in MODULES:
                    found.append((submodule, "", node.lineno))
                else:
                    found.append((target, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tfdiag_magic."):
                    found.append((alias.name.removeprefix("tfdiag_magic."), "", node.lineno))
    return found


def test_every_module_has_a_layer():
    assert all(layer_of(m) for m in MODULES)
    assert layer_of("diagnose.oom") == "analysis"
    assert layer_of("gpu.render") == "views"
    assert layer_of("") == "front"


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for module in MODULES:
        mine = ORDER.index(layer_of(module))
        for target, name, line in imports_of(module):
            theirs = ORDER.index(layer_of(target))
            if theirs > mine:
                what = (f"{target}.{name}" if target else name) if name else target
                upward.append(
                    f"{module} ({layer_of(module)}) line {line} imports {what or 'tfdiag_magic'}"
                    f" ({layer_of(target)})"
                )
    assert not upward, "\n".join(upward)


def test_no_two_modules_import_each_other():
    graph = {m: {t for t, _name, _line in imports_of(m) if t != m} for m in MODULES}
    both = sorted(
        f"{a} <-> {b}"
        for a, targets in graph.items()
        for b in targets
        if a < b and a in graph.get(b, set()) and not (a == "" or b == "")
    )
    assert not both, "\n".join(both)


def test_no_private_name_is_imported_from_another_module():
    private = [
        f"{module} line {line} imports {target}.{name}"
        for module in MODULES
        for target, name, line in imports_of(module)
        if name.startswith("_") and not name.startswith("__") and target != module
    ]
    assert not private, "\n".join(private)


# The readings of the stack allowed: where the user's code is (the profiled file's innermost
# and outermost frames) at a memory sample, a long GC pause, a model build or a Keras call, the
# location findings give (issue 19); and, once per run, how many frames the tool puts under the
# code (to raise the recursion limit by as many). They read no module's state.
STACK_READERS = {"recorder": "Recorder.user_lines", "code_runner": "_tool_frames"}


def test_nothing_walks_the_stack():
    walkers = [
        f"{module_name(path)} line {number}"
        for path in MODULES.values()
        for number, text in enumerate(path.read_text().splitlines(), 1)
        if "_getframe(" in text or "inspect.stack(" in text or "inspect.currentframe(" in text
    ]
    allowed = [w for w in walkers if w.split(" line ")[0] in STACK_READERS]
    assert len(allowed) <= len(STACK_READERS), allowed  # one place in each, no more
    walkers = [w for w in walkers if w not in allowed]
    assert not walkers, "\n".join(walkers)


@pytest.mark.parametrize(
    ("module", "layer"),
    [("record", "foundation"), ("probes.keras_calls", "capture"), ("magics", "front")],
)
def test_layer_names_read_as_documented(module, layer):
    assert layer_of(module) == layer
