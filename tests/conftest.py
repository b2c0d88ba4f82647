"""Shared fixtures: a real IPython shell with the extension loaded, on real TensorFlow.

TensorFlow is configured once per test process with two logical CPU devices, so that
tf.distribute.MirroredStrategy can be tested without a GPU. That must happen before TensorFlow
initialises its runtime, hence at import of this file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
import tensorflow as tf

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

# The browser tests' Chromium and JupyterLab server: session fixtures, started once per process.
pytest_plugins = ("tests.browser_lab",)

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--claims-runs",
        type=int,
        default=0,
        help="runs per notebook of tests/test_notebook_claims.py (0: none; make test-claims: 5)",
    )


@pytest.fixture(scope="session")
def shell():
    """The process's real IPython InteractiveShell, with tfdiag_magic loaded."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "tfdiag_magic")
    return ip


@pytest.fixture
def ip(shell):
    """The shell with a clean user namespace for one test.

    Reset before the test only: a reset runs a full garbage collection (IPython's), which takes
    a second with TensorFlow's objects in the heap, and the next test's reset clears this one's
    names anyway (tests that take `shell` itself reset it when they need it clean).

    The heap stays in the collector's view, as in a kernel. Frozen out of it (`gc.freeze`
    after the imports), that collection was cheap, but the collector then ran its full
    collections far more often (it waits for the objects it tracks to grow by a quarter), and
    freed the models a fold loop drops before the memory they held could be seen to grow: a
    test of that finding failed beside a CPU hog. Reset without that collection (0.29 s of CPU a
    reset, median of 111), the suite's CPU fell by a sixth, but the collector's own full
    collections then came inside the tests, at times set by what earlier tests left: three
    failed in one run (a model search's memory freed before it could be seen to grow, twice;
    a tracing lengthened past retracing's bar).
    """
    shell.reset(new_session=False)
    return shell


@pytest.fixture(autouse=True)
def _drop_the_last_exception():
    """Let go of the last exception a shell showed (``sys.last_value``, and the traceback its
    formatter keeps) when the test ends, as the test's own names go.

    A traceback keeps its frames' locals, and among them can be a tf.data iterator (a `fit`
    that raised over a dataset). Its destructor waits for the autotuner's thread, whose sleep
    grows with the iterator's life: freed tests later, when another cell's exception replaced
    it, one such iterator held a shell reset for 18-43 s (test_faithful_cells.py, in gdb:
    ``RootDataset::Iterator::~Iterator`` waiting on ``Model::OptimizeLoop``)."""
    yield
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():  # its traceback formatter keeps the last one too
        InteractiveShell.instance().InteractiveTB.tb = None


def _gradient_registry() -> dict | None:
    """TensorFlow's global table of gradient functions by op type (None where this TensorFlow
    keeps it elsewhere: the clean-up below is then skipped, and the suite is only slower)."""
    from tensorflow.python.framework import ops

    table = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    return table if isinstance(table, dict) else None


@pytest.fixture(autouse=True)
def _drop_the_tests_custom_gradients():
    """Drop the gradient functions a test's tracing added to TensorFlow's global registry.

    Each trace of a Keras train step registers a `CustomGradient-<uid>` function (Keras'
    optimizer sums its gradients through `tf.custom_gradient`), and the function holds the
    traced graph: about 6,000 objects a `fit`, kept for the process's life. Over a worker's
    hundreds of tests they grew the heap past a million objects, and every full garbage
    collection (each shell reset runs one) walked them all: 14 % of a module run's time. Only
    the entries added during the test go; they are looked up while their own graph is traced
    and differentiated, which has happened by the test's end.
    """
    table = _gradient_registry()
    known = len(table) if table is not None else 0
    yield
    if table is not None:
        for name in list(table)[known:]:
            if name.startswith("CustomGradient-"):
                del table[name]


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def start_cpu_hog(cpu: int = -1) -> subprocess.Popen:
    """A busy Python process pinned to one of this process's CPUs (by index among them: the
    last by default): a neighbour on a shared machine. Stop it with `stop_cpu_hog` (by its
    own pid)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    # The hog pins itself (a preexec_fn is unsafe in a process with TensorFlow's threads).
    pin = f"import os; os.sched_setaffinity(0, {{{cpus[cpu % len(cpus)]}}})\n" if cpus else ""
    return subprocess.Popen([sys.executable, "-c", pin + "while True: pass"])


def stop_cpu_hog(hog: subprocess.Popen) -> None:
    hog.kill()
    hog.wait(timeout=10)


@pytest.fixture
def cpu_hog():
    """A CPU hog on one core for the length of the test."""
    hog = start_cpu_hog()
    try:
        yield hog
    finally:
        stop_cpu_hog(hog)


def others_busy_cpus(seconds: float = 0.5) -> float:
    """The CPUs other programs kept busy over `seconds` (this process sleeps meanwhile), from
    Linux's /proc/stat; 0.0 where it cannot be read."""
    import time

    def busy_and_total() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
        return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # less idle and iowait

    try:
        busy0, total0 = busy_and_total()
        time.sleep(seconds)
        busy1, total1 = busy_and_total()
    except (OSError, ValueError, IndexError):
        return 0.0
    cpus = os.cpu_count() or 1
    return cpus * (busy1 - busy0) / max(total1 - total0, 1)


@pytest.fixture
def busy_machine():
    """Neighbours enough to keep both of a 2-CPU machine's CPUs busy for the length of the
    test: a CPU hog for each CPU that other programs (the other test workers) do not keep
    busy already, pinned to the first two of this process's CPUs."""
    others = others_busy_cpus()
    free = 2 if others < 0.7 else 1 if others < 1.5 else 0
    hogs = [start_cpu_hog(cpu) for cpu in (0, 1)[:free]]
    try:
        yield hogs
    finally:
        for hog in hogs:
            stop_cpu_hog(hog)


@pytest.fixture
def neighbour():
    """One busy neighbour for the length of the test: a CPU hog on one core, unless other
    programs keep most of a CPU busy already (then a second hog on a 2-CPU machine leaves the
    test's own process little CPU: not the one neighbour the test is about)."""
    if others_busy_cpus() >= 0.7:
        yield None
        return
    hog = start_cpu_hog()
    try:
        yield hog
    finally:
        stop_cpu_hog(hog)


# `make test` runs the suite on pytest-xdist workers (--dist loadgroup; three by default, two for
# make test-workshop and in CI). A module runs whole on one worker (marked here as its own xdist
# group), so that its kernel, server or command-line run starts once; the browser tests' modules
# make one group (GROUPS), so that one JupyterLab server and one browser serve them all. The
# modules in SPREAD are the exception: each of their tests starts what it needs itself (a
# notebook's kernel, a corpus program's interpreter) and is handed out on its own, so that all
# workers share them. Work is handed out in collection order as workers come free, so the
# longest go first: none of them starts last while another worker sits idle. The rest keep
# their order. A run without xdist keeps the plain order.
LONGEST_FIRST = (
    "test_binder.py",
    "test_notebooks.py::test_notebook_tells_its_story_then_runs_again_with_its_exercises_solved",
    "test_notebook_exercises.py::test_each_part_runs_alone_after_the_set_up_cells",
    "test_corpus.py",
    "test_browser",
)
SPREAD = ("test_notebooks.py", "test_notebook_exercises.py", "test_corpus.py")
GROUPS = {
    "test_browser.py": "browser",
    "test_browser_ops.py": "browser",
    "test_browser_workers.py": "browser",
}


def _rank(item: pytest.Item) -> int:
    where = f"{item.path.name}::{item.name}"
    ranks = (i for i, prefix in enumerate(LONGEST_FIRST) if where.startswith(prefix))
    return next(ranks, len(LONGEST_FIRST))


class SuiteSetUpFailure(pytest.Item):
    """A test that fails with `message`: how the suite's own set-up reports a mistake found
    at collection on an xdist worker (an exception there reads only as xdist's
    INTERNALERROR)."""

    def __init__(self, *, message: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        pytest.fail(self.message, pytrace=False)

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, self.name


def _check_alone_tests_are_listed(session: pytest.Session, items: list[pytest.Item]) -> None:
    """`make test`'s alone tier collects only the modules it lists (TFDIAG_ALONE_TESTS, found
    by a search for the mark's text): a module whose `alone` tests the search missed would have
    them run nowhere, so the parallel pass gets a failing test instead."""
    listed = os.environ.get("TFDIAG_ALONE_TESTS")
    if listed is None:
        return
    names = {Path(path).name for path in listed.split()}
    missed = sorted(
        {
            item.path.name
            for item in items
            if item.get_closest_marker("alone") is not None and item.path.name not in names
        }
    )
    if missed:
        message = (
            f"tests marked alone in {', '.join(missed)}, which make test's alone tier does not"
            " collect: mark them with `pytest.mark.alone` written out (the Makefile's"
            " ALONE_TESTS searches for it)"
        )
        items.insert(0, SuiteSetUpFailure.from_parent(session, name="alone-tier", message=message))


@pytest.hookimpl(tryfirst=True)  # before xdist's worker sends the collected ids
def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup`` xdist hands out a group whole only where the group's name
    ends the test's node id: a pytest whose node ids xdist cannot rewrite (9.2 with xdist 3.8)
    makes every test its own group, silently, and each worker sets up each module's kernel or
    shell again. The suite then fails instead."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    grouped = [item for item in session.items if item.get_closest_marker("xdist_group")]
    if grouped and "@" not in grouped[0].nodeid:
        message = (
            f"xdist ignores the module groups with pytest {pytest.__version__}: its node ids"
            " no longer carry the group's name (pytest-xdist issue 1386); use the pytest"
            " version pyproject.toml asks for"
        )
        session.items.insert(
            0, SuiteSetUpFailure.from_parent(session, name="module-groups", message=message)
        )


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    _check_alone_tests_are_listed(session, items)
    if not hasattr(config, "workerinput"):  # not an xdist worker
        return
    for item in items:
        if item.path.name not in SPREAD:
            group = GROUPS.get(item.path.name, item.path.name)
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_rank)
