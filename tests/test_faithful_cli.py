"""``python -m tfdiag_magic profile SCRIPT`` behaves as ``python SCRIPT``: a differential test.

Each script runs plainly (``python ./SCRIPT ARGS`` in a subprocess, the reference) and under the
tool, by calling `tfdiag_magic.cli.main` in this process (so that what it leaves behind in
`sys` can be checked) and, for a few scripts, as ``python -m tfdiag_magic profile`` in a
subprocess. Compared: the exit status, stderr (messages and tracebacks), the script's own
stdout (the tool's report follows it), what the script sees of itself (``__file__``,
``sys.argv``, ``sys.path[0]``, its ``__main__`` module, its globals, real annotations). After
an in-process run, `sys.argv`, `sys.path` and ``sys.modules["__main__"]`` are the caller's
again, however the script ended, and the report was written.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tfdiag_magic import cli

from .helpers import DEEPEST_RECURSION, FAILING_OP_IN_A_FUNCTION

REPO = Path(__file__).resolve().parents[1]
# TensorFlow's native start-up log, printed by the tool's import of TensorFlow (a plain script
# that imports TensorFlow prints it too): not the script's output.
TF_LOG = re.compile(r"^(WARNING: All log messages before absl|[IWE]\d{4} |To enable the following)")

SCRIPTS = {
    "exit-0": "import sys\nprint('before')\nsys.exit(0)\nprint('after')\n",
    "exit-3": "import sys\nprint('before')\nsys.exit(3)\n",
    "exit-message": "import sys\nsys.exit('stopped: no data in ' + sys.argv[1])\n",
    "exit-none": "import sys\nsys.exit()\n",
    "exit-in-loop": "import sys\nfor i in range(5):\n    if i == 2:\n        sys.exit(4)\n",
    "exit-object": "import sys\nsys.exit(['not', 'a', 'code'])\n",
    "raise": """\
def load(name):
    try:
        return {}[name]
    except KeyError as exc:
        raise RuntimeError(f"no such table: {name}") from exc

for attempt in range(2):
    print("attempt", attempt)
load("users")
""",
    "keyboard-interrupt": "print('working')\nraise KeyboardInterrupt\n",
    "syntax-error": "print('never')\nx = (\n",
    "annotations": """\
import dataclasses, typing
limit: int = 3
def scale(value: float, factor: "int" = 2) -> list[float]:
    return [value * factor]
@dataclasses.dataclass
class Config:
    rate: float
    steps: int = 2
print(__annotations__)
print(scale.__annotations__)
print({f.name: f.type for f in dataclasses.fields(Config)})
print(typing.get_type_hints(scale))
""",
    "identity": """\
import json, os, sys, pickle
class Config:
    pass
print(json.dumps({
    "file": __file__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "name": __name__,
    "main_is_this_module": sys.modules["__main__"].__dict__ is globals(),
    "builtins": type(__builtins__).__name__,
    "loader": type(__loader__).__name__,
    "spec": __spec__,
    "package": __package__,
    "cached": __cached__,
    "doc": __doc__,
    "pickles": type(pickle.loads(pickle.dumps(Config()))).__qualname__,
}))
""",
    "loops-in-functions": """\
import builtins, inspect, sys


class Base:
    def total(self, values):
        s = 0
        for v in values:
            s += v
        return s


class Child(Base):
    def total(self, values, bonus=1):
        t = super().total(values)
        for v in values:
            t += bonus
        return t


def make_scaler(k):
    def scale(values):
        return [k * v for v in values if v is not None]
    def scale_loop(values):
        out = []
        for v in values:
            out.append(k * v)
        return out
    return scale_loop


def squares(n):
    for i in range(n):
        yield i * i


def countdown(n):
    seen = []
    while n > 0:
        seen.append(n)
        n -= 1
    return seen


def main(argv):
    gen = squares(4)
    print(next(gen), Child().total([1, 2, 3]), make_scaler(2)(argv[:1] * 2), countdown(3))
    print(list(gen), inspect.getsource(countdown).splitlines()[2])
    print(countdown.__code__.co_firstlineno, Child.total.__code__.co_firstlineno)
    print(sorted(name for name in [*globals(), *vars(builtins)] if "tfdiag" in name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
""",
    "raise-in-a-functions-loop": """\
import sys


def load(batches):
    loaded = []
    for batch in batches:
        if batch == 2:
            raise ValueError(f"corrupt batch {batch} of {sys.argv[1]}")
        loaded.append(batch)
    return loaded


class Loader:
    def run(self):
        attempt = 0
        while attempt < 3:
            attempt += 1
            print("attempt", attempt)
            load(range(4))


def main():
    Loader().run()


if __name__ == "__main__":
    main()
""",
    "mutates-sys": """\
import sys
sys.path.insert(0, "/nowhere")
sys.argv.append("added")
sys.argv = ["replaced"]
sys.path = ["gone"]
sys.modules["__main__"] = None
print("done")
""",
}
ARGS = ["alpha", "--json", "not-ours.json"]  # everything after the script is the script's


@dataclass
class Ended:
    status: int  # as a shell shows it: 128 + N for a process killed by signal N
    stdout: str
    stderr: str


def _script(folder: Path, name: str) -> Path:
    script = folder / f"{name.replace('-', '_')}.py"
    script.write_text({**SCRIPTS, **IN_ITS_OWN_INTERPRETER}[name], encoding="utf-8")
    return script


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _subprocess(args: list[str], cwd: Path) -> Ended:
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Python re-raises an uncaught KeyboardInterrupt's SIGINT on itself; a shell shows 130.
    status = 128 - proc.returncode if proc.returncode < 0 else proc.returncode
    stderr = "".join(line for line in proc.stderr.splitlines(True) if not TF_LOG.match(line))
    return Ended(status, proc.stdout, stderr)


def plain(script: Path) -> Ended:
    return _subprocess([f"./{script.name}", *ARGS], script.parent)


def in_process(script: Path, capsys, monkeypatch) -> tuple[Ended, Path]:
    """`cli.main` on the script, from its folder; checks that `sys` is given back."""
    monkeypatch.chdir(script.parent)
    report = script.parent / "report.json"
    argv, path, path_items, main = sys.argv, sys.path, list(sys.path), sys.modules["__main__"]
    capsys.readouterr()
    status = cli.main(["profile", "--json", str(report), f"./{script.name}", *ARGS])
    out, err = capsys.readouterr()
    assert sys.argv is argv
    assert sys.path is path and sys.path == path_items
    assert sys.modules["__main__"] is main
    return Ended(status, out, err), report


# An op that fails when its graph runs: TensorFlow's message lists where the op was "defined
# at", a stack from the interpreter's start. Run in a subprocess only: in this process that
# stack holds pytest's frames, which a plain run has not.
IN_ITS_OWN_INTERPRETER = {
    "tf-op-error": FAILING_OP_IN_A_FUNCTION,
    # The deepest recursion Python allows, then one that goes past the limit, uncaught: the
    # tool's frames under the script must not end it sooner (TensorFlow's tf.function guide
    # shows a RecursionError on purpose).
    "deep-recursion": DEEPEST_RECURSION + "print(deepest())\ngo(5000)\n",
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_profiled_script_ends_as_the_plain_script_and_gives_sys_back(
    name: str, tmp_path, capsys, monkeypatch
):
    script = _script(tmp_path, name)
    reference = plain(script)
    profiled, report = in_process(script, capsys, monkeypatch)
    assert profiled.status == reference.status
    assert profiled.stderr == reference.stderr
    assert profiled.stdout.startswith(reference.stdout)  # the script's output, then the report
    if name == "syntax-error":
        assert not report.exists()  # nothing ran: no report, as the stdout says
        assert "did not compile" in profiled.stdout
    else:
        assert "tfdiag_magic:" in profiled.stdout[len(reference.stdout) :]
        assert json.loads(report.read_text(encoding="utf-8"))["schema"] == 1


def test_the_report_starts_on_a_line_of_its_own_after_output_without_a_newline(
    tmp_path, capsys, monkeypatch
):
    script = tmp_path / "progress.py"
    script.write_text("print('epoch 1/1 done', end='')\n", encoding="utf-8")
    profiled, _ = in_process(script, capsys, monkeypatch)
    # It read "epoch 1/1 donetfdiag_magic: 0 training steps ...".
    assert profiled.stdout.splitlines()[:2][0] == "epoch 1/1 done"
    assert profiled.stdout.splitlines()[1].startswith("tfdiag_magic: ")


def test_the_report_lists_the_loops_that_ran_with_their_iterations(tmp_path, capsys, monkeypatch):
    # The script stops before its second loop: it was listed as a loop of the run.
    script = tmp_path / "stops.py"
    script.write_text(
        "for i in range(3):\n    pass\nraise ValueError('stop')\nfor j in range(5):\n    pass\n",
        encoding="utf-8",
    )
    profiled, _ = in_process(script, capsys, monkeypatch)
    assert profiled.status == 1
    listed = [line for line in profiled.stdout.splitlines() if line.startswith("  line 1: ")]
    assert listed and listed[0].startswith("  line 1: for i in range(3): (3 iterations; bodies ")
    assert "; its thread on the CPU " in listed[0], listed
    assert "for j in range(5)" not in profiled.stdout


def test_the_reference_runs_show_what_is_compared(tmp_path):
    """The plain runs the comparison relies on end as Python documents."""
    ended = {name: plain(_script(tmp_path, name)) for name in ("exit-3", "exit-message")}
    assert ended["exit-3"].status == 3 and ended["exit-3"].stderr == ""
    assert ended["exit-message"].status == 1
    assert ended["exit-message"].stderr == "stopped: no data in alpha\n"
    interrupted = plain(_script(tmp_path, "keyboard-interrupt"))
    assert interrupted.status == 128 + signal.SIGINT
    assert interrupted.stderr.endswith("KeyboardInterrupt\n")


def test_annotations_stay_objects_as_without_future_annotations(tmp_path, capsys, monkeypatch):
    script = _script(tmp_path, "annotations")
    profiled, _ = in_process(script, capsys, monkeypatch)
    assert profiled.stdout.startswith("{'limit': <class 'int'>}\n")
    assert "'value': <class 'float'>" in profiled.stdout
    assert "'return': list[float]" in profiled.stdout


def test_file_is_absolute_and_argv_is_as_typed(tmp_path, capsys, monkeypatch):
    script = _script(tmp_path, "identity")
    profiled, _ = in_process(script, capsys, monkeypatch)
    seen = json.loads(profiled.stdout.splitlines()[0])
    assert seen["file"] == os.path.join(str(tmp_path), f"./{script.name}")
    assert seen["argv"] == [f"./{script.name}", *ARGS]
    assert seen["path0"] == os.path.realpath(tmp_path)
    assert seen["main_is_this_module"] is True
    assert seen["pickles"] == "Config"


def test_script_globals_while_it_runs_are_the_plain_ones(tmp_path, capsys, monkeypatch):
    """`globals()` inside a script with a top-level loop holds only the script's names."""
    source = "import sys\nfor i in range(2):\n    pass\nprint(sorted(globals()))\n"
    script = tmp_path / "names.py"
    script.write_text(source, encoding="utf-8")
    reference = plain(script)
    profiled, _ = in_process(script, capsys, monkeypatch)
    assert profiled.stdout.splitlines()[0] == reference.stdout.splitlines()[0]


@pytest.mark.parametrize("name", ["exit-message", "raise", "tf-op-error", "deep-recursion"])
def test_python_m_tfdiag_magic_profile_ends_as_python_script(name: str, tmp_path):
    """The whole command, in its own interpreter, as a user runs it. (TensorFlow's stack of
    where an op was defined named runpy's frames and the tool's.)"""
    script = _script(tmp_path, name)
    reference = plain(script)
    profiled = _subprocess(
        ["-m", "tfdiag_magic", "profile", f"./{script.name}", *ARGS], script.parent
    )
    assert profiled.status == reference.status
    assert profiled.stderr == reference.stderr
    assert profiled.stdout.startswith(reference.stdout)
    assert (tmp_path / f"{script.stem}.tfdiag.json").is_file()
    assert not (tmp_path / "not-ours.json").exists()


def test_a_report_file_that_cannot_be_written_is_one_line_and_keeps_the_exit_status(
    tmp_path, capsys, monkeypatch
):
    """--json inside a path that is a file: one stderr line says why, the report text still
    prints, and the status is the script's own; --html under ~ and a missing folder is written
    there."""
    script = _script(tmp_path, "exit-3")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "taken").write_text("a file, not a folder")
    capsys.readouterr()
    status = cli.main(
        ["profile", "--json", "taken/r.json", "--html", "~/new/r.html", f"./{script.name}"]
    )
    out, err = capsys.readouterr()
    assert status == 3
    problems = [line for line in err.splitlines() if line.startswith("tfdiag_magic:")]
    assert len(problems) == 1 and "could not write the JSON report" in problems[0], err
    assert "tfdiag_magic:" in out  # the report's text
    written = tmp_path / "home" / "new" / "r.html"
    assert written.is_file() and f"HTML report: {written}" in out
    assert not (tmp_path / "~").exists()


def test_a_folder_given_for_the_reports_gets_them_named_after_the_script(tmp_path, monkeypatch):
    """--json and --html naming a folder (existing, or ending in /) write SCRIPT.tfdiag.json
    and SCRIPT.tfdiag.html in it; a worker of a multi-worker job adds its name."""
    script = _script(tmp_path, "exit-3")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    assert cli.main(["profile", "--json", "reports", "--html", "pages/", script.name]) == 3
    assert (tmp_path / "reports" / f"{script.stem}.tfdiag.json").is_file()
    assert (tmp_path / "pages" / f"{script.stem}.tfdiag.html").is_file()
    config = '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}'
    monkeypatch.setenv("TF_CONFIG", config)
    assert cli.main(["profile", "--json", "reports/", script.name]) == 3
    report = json.loads((tmp_path / "reports" / f"{script.stem}.worker-1.tfdiag.json").read_text())
    assert report["environment"]["worker"] == {
        "task_type": "worker",
        "task_index": 1,
        "workers": 2,
        "source": "TF_CONFIG",
    }


def test_relative_report_paths_are_the_commands_though_the_script_changes_folder(
    tmp_path, monkeypatch, capsys
):
    """A script that works in a folder of its own (`os.chdir` into a run folder, as the
    distributed-training tutorial's temporary one) still gets its reports where the command
    named them, from where it started; without --json, beside the script."""
    (tmp_path / "runs").mkdir()
    script = tmp_path / "train.py"
    script.write_text("import os\nos.chdir('runs')\nprint('trained in', os.getcwd())\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "--json", "out.json", "--html", "pages/", script.name]) == 0
    assert (tmp_path / "out.json").is_file()
    assert (tmp_path / "pages" / "train.tfdiag.html").is_file()
    assert not (tmp_path / "runs" / "out.json").exists()
    out = capsys.readouterr().out
    assert f"JSON report: {tmp_path / 'out.json'}" in out  # where it went, said in full
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", script.name]) == 0
    assert (tmp_path / "train.tfdiag.json").is_file()


# TensorFlow prints a deprecated argument's warning only while its context does not exist yet
# (`deprecation.deprecated_args` asks `is_in_graph_mode`), so a script whose first TensorFlow
# call passes one prints it: the tool must not make that context before the script does.
DEPRECATED_FIRST = """\
import tensorflow as tf

def numbers():
    yield 1.0

dataset = tf.data.Dataset.from_generator(numbers, output_types=tf.float32)
print(sum(1 for _ in dataset))
"""


def test_tensorflows_deprecation_warning_prints_as_in_the_plain_script(tmp_path):
    script = tmp_path / "deprecated.py"
    script.write_text(DEPRECATED_FIRST, encoding="utf-8")
    reference = plain(script)
    assert "output_types is deprecated" in reference.stderr, reference.stderr
    profiled = _subprocess(["-m", "tfdiag_magic", "profile", f"./{script.name}"], tmp_path)
    assert profiled.status == reference.status == 0
    assert profiled.stderr == reference.stderr
    assert profiled.stdout.startswith(reference.stdout)


@pytest.mark.parametrize("value", ["0", "1"])
def test_tensorflow_starts_with_the_settings_the_script_makes_before_importing_it(tmp_path, value):
    """TensorFlow reads `TF_ENABLE_ONEDNN_OPTS` once, when it is imported: a script that sets
    it before its import gets the kernels it asked for (and their last digits), though the
    tool imports TensorFlow before the script's first line. Both values: one of them is the
    machine's default, which would pass with the setting ignored (off on this 2-vCPU EPYC
    without AVX-512, on where AVX-512 is)."""
    script = tmp_path / "onednn.py"
    script.write_text(
        "import os\n"
        f"os.environ['TF_ENABLE_ONEDNN_OPTS'] = '{value}'\n"
        "import tensorflow as tf\n"
        "from tensorflow.python.util import _pywrap_util_port\n"
        "print('oneDNN', _pywrap_util_port.IsMklEnabled())\n",
        encoding="utf-8",
    )
    profiled = _subprocess(
        ["-m", "tfdiag_magic", "profile", "--json", "r.json", f"./{script.name}"], tmp_path
    )
    assert profiled.status == 0, profiled.stderr
    assert profiled.stdout.startswith(f"oneDNN {value == '1'}\n"), profiled.stdout
    facts = json.loads((tmp_path / "r.json").read_text())["environment"]
    assert facts["environment_set_before_tensorflow"] == {"TF_ENABLE_ONEDNN_OPTS": value}
