"""The command line and the plain-Python entry points, each run in a fresh interpreter.

``python -m tfdiag_magic profile`` on a small Keras script (a clean run, a failing run, a missing
script), ``python -m tfdiag_magic demo``, ``with tfdiag_magic.profile()`` in a plain program,
and what happens when TensorFlow cannot be imported. Every run is a real subprocess on real
TensorFlow and Keras; the tests read its exit code, its output and the files it wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TRAINING_SCRIPT = """\
import json
import sys

import keras
import numpy as np

print("ARGV=" + json.dumps(sys.argv))
print("NAME=" + __name__)

if __name__ == "__main__":
    x = np.zeros((6, 4), "float32")
    y = np.zeros((6, 1), "float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, shuffle=False)

total = 0
for i in range(3):
    total += i
print("TOTAL=" + str(total))


class Config:
    pass


import pickle  # noqa: E402
print("PICKLED=" + str(len(pickle.dumps(Config())) > 0))
"""

FAILING_SCRIPT = """\
import keras
import numpy as np

x = np.zeros((4, 3), "float32")
y = np.zeros((4, 1), "float32")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
for i in range(3):
    model.train_on_batch(x, y)


def check_data(batch):
    raise ValueError(f"corrupt batch {batch}")


check_data(3)
"""

PROFILE_BLOCK_PROGRAM = """\
import json
import traceback

import keras
import numpy as np

import tfdiag_magic
from tfdiag_magic import step

x = np.zeros((4, 3), "float32")
y = np.zeros((4, 1), "float32")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")

with tfdiag_magic.profile() as on_batch:
    for _ in range(5):
        model.train_on_batch(x, y)

with tfdiag_magic.profile() as marked:
    for _ in range(4):
        with step():
            sum(range(1000))

raised = LookupError("from the block")
caught = None
with tfdiag_magic.profile() as partial:
    pass
try:
    with tfdiag_magic.profile() as partial:
        for _ in range(3):
            with step():
                pass
        raise raised  # RAISE-LINE
except LookupError as exc:
    caught = exc

print("RESULT=" + json.dumps({
    "on_batch_phases": on_batch.record.phase_counts(),
    "on_batch_count": on_batch.report()["steps"]["count"],
    "on_batch_error": on_batch.report()["error"],
    "marked_phases": marked.record.phase_counts(),
    "marked_count": marked.report()["steps"]["count"],
    "same_exception": caught is raised,
    "raise_line": traceback.extract_tb(caught.__traceback__)[-1].lineno,
    "partial_phases": partial.record.phase_counts(),
    "partial_error": partial.report()["error"],
}))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _strict_json(text: str):
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _tagged(stdout: str, tag: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith(tag + "=")]
    return line[len(tag) + 1 :]


# -- python -m tfdiag_magic profile ---------------------------------------------------------


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clean")
    script = folder / "train.py"
    script.write_text(TRAINING_SCRIPT, encoding="utf-8")
    out = folder / "out.json"
    proc = _python(
        "-m",
        "tfdiag_magic",
        "profile",
        "--json",
        str(out),
        str(script),
        "alpha",
        "--json",
        "not-ours.json",
        cwd=folder,
    )
    return proc, script, out, folder


def test_profile_of_a_clean_script_exits_0_and_prints_the_text_report(clean_run):
    proc, _, _, _ = clean_run
    assert proc.returncode == 0, proc.stderr
    assert "tfdiag_magic:" in proc.stdout
    assert "6 training steps" in proc.stdout
    assert "3 loop iterations" in proc.stdout
    assert _tagged(proc.stdout, "TOTAL") == "3"  # the script ran to its end


def test_profile_writes_strict_json_with_6_steps_and_no_error(clean_run):
    proc, _, out, _ = clean_run
    assert proc.returncode == 0, proc.stderr
    report = _strict_json(out.read_text(encoding="utf-8"))
    assert report["schema"] == 1
    assert report["steps"]["count"] == 6
    assert report["steps"]["phases"]["train"]["count"] == 6
    assert report["steps"]["phases"]["loop"]["count"] == 3
    assert report["error"] is None
    assert [loop["lineno"] for loop in report["loops"]] == [18]


def test_script_runs_as_main_with_argv_of_the_script_and_the_arguments_after_it(clean_run):
    proc, script, _, folder = clean_run
    assert proc.returncode == 0, proc.stderr
    assert _tagged(proc.stdout, "NAME") == "__main__"
    # everything after the script's name is the script's, even what looks like our option
    assert json.loads(_tagged(proc.stdout, "ARGV")) == [
        str(script),
        "alpha",
        "--json",
        "not-ours.json",
    ]
    assert not (folder / "not-ours.json").exists()
    # ...and the report says so, after it, where the user who meant it for us looks
    assert "tfdiag_magic: --json came after the script's name" in proc.stdout
    assert proc.stdout.rstrip().endswith(f"profile --json ... {script}")
    assert "came after the script's name" not in proc.stderr  # as a plain run leaves it


def test_classes_defined_by_the_script_pickle_as_in_a_plain_run(clean_run):
    proc, _, _, _ = clean_run
    assert _tagged(proc.stdout, "PICKLED") == "True", proc.stderr


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    """The failing script, profiled without --json: its report goes beside it."""
    folder = tmp_path_factory.mktemp("failing")
    script = folder / "fails.py"
    script.write_text(FAILING_SCRIPT, encoding="utf-8")
    proc = _python("-m", "tfdiag_magic", "profile", str(script), cwd=folder)
    return proc, script, folder


def test_failing_script_exits_1_prints_its_traceback_and_keeps_the_steps(failing_run):
    proc, script, folder = failing_run
    assert proc.returncode == 1
    # the script's own exception, with its own frames, on stderr
    assert "Traceback (most recent call last):" in proc.stderr
    assert "ValueError: corrupt batch 3" in proc.stderr
    assert f'File "{script}", line 16' in proc.stderr
    assert f'File "{script}", line 13, in check_data' in proc.stderr
    assert "3 training steps" in proc.stdout
    assert "stopped by ValueError" in proc.stdout
    report = _strict_json((folder / "fails.tfdiag.json").read_text(encoding="utf-8"))
    assert report["steps"]["count"] == 3
    assert report["error"]["type"] == "ValueError"
    assert report["error"]["message"] == "corrupt batch 3"
    assert report["error"]["step"] == 3


def test_default_json_path_is_next_to_the_script(failing_run):
    proc, _, folder = failing_run
    assert proc.returncode == 1
    assert sorted(path.name for path in folder.iterdir()) == ["fails.py", "fails.tfdiag.json"]
    assert "JSON report: " in proc.stdout and "fails.tfdiag.json" in proc.stdout


def test_missing_script_exits_2_with_a_clear_message(tmp_path):
    missing = tmp_path / "nowhere" / "train.py"
    proc = _python("-m", "tfdiag_magic", "profile", str(missing), cwd=tmp_path)
    assert proc.returncode == 2
    assert f"no such script: {missing}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.rglob("*.json"))


# -- with tfdiag_magic.profile() in a plain program -----------------------------------------


@pytest.fixture(scope="module")
def block_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("block")
    program = folder / "program.py"
    program.write_text(PROFILE_BLOCK_PROGRAM, encoding="utf-8")
    proc = _python(str(program), cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return json.loads(_tagged(proc.stdout, "RESULT"))


def test_profile_block_counts_5_train_on_batch_calls_as_5_training_steps(block_run):
    assert block_run["on_batch_phases"] == {"train": 5}
    assert block_run["on_batch_count"] == 5
    assert block_run["on_batch_error"] is None


def test_profile_block_counts_4_step_markers_as_4_steps(block_run):
    assert block_run["marked_phases"] == {"train": 4}
    assert block_run["marked_count"] == 4


def test_exception_in_profile_block_propagates_unchanged_and_partial_record_is_kept(block_run):
    assert block_run["same_exception"] is True
    raise_line = PROFILE_BLOCK_PROGRAM.splitlines().index("        raise raised  # RAISE-LINE") + 1
    assert block_run["raise_line"] == raise_line
    assert block_run["partial_phases"] == {"train": 3}
    assert block_run["partial_error"] == {
        "type": "LookupError",
        "message": "from the block",
        "step": 3,
        "phase": None,
        "batch": None,  # raised between steps: no failing step, no batch size
    }


# -- python -m tfdiag_magic demo ------------------------------------------------------------

EXTERNAL_REFERENCE = re.compile(
    r"""(?:\b(?:src|href)\s*=\s*["']?\s*|url\(\s*["']?\s*)(?:https?:)?//""", re.IGNORECASE
)


def test_demo_reports_the_retracing_train_step_and_writes_a_self_contained_html(tmp_path):
    html_path = tmp_path / "report" / "demo.html"
    proc = _python("-m", "tfdiag_magic", "demo", "--html", str(html_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"^\s*train_step: (\d+) calls, (\d+) traces", proc.stdout, re.MULTILINE)
    assert match, proc.stdout
    calls, traces = int(match[1]), int(match[2])
    assert calls > 1
    assert traces >= calls  # it retraced on every call
    assert "retracing" in proc.stdout
    html = html_path.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert "train_step" in html
    assert 'src="data:image/png;base64,' in html  # the plot is embedded
    assert EXTERNAL_REFERENCE.search(html) is None
    assert "<script src" not in html.lower() and "<link" not in html.lower()
    report = _strict_json(html_path.with_suffix(".json").read_text(encoding="utf-8"))
    assert report["steps"]["count"] == calls


# -- without TensorFlow ---------------------------------------------------------------------

NO_TENSORFLOW = "import sys; sys.modules['tensorflow'] = None\n"


def test_profile_without_tensorflow_raises_tensorflow_missing_error_saying_what_to_install(
    tmp_path,
):
    code = NO_TENSORFLOW + textwrap.dedent(
        """
        import tfdiag_magic
        from tfdiag_magic.tf_runtime import TensorFlowMissingError
        try:
            with tfdiag_magic.profile():
                print("BODY-RAN")
        except TensorFlowMissingError as exc:
            print("MISSING=" + repr(str(exc)))
        """
    )
    proc = _python("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "BODY-RAN" not in proc.stdout
    message = _tagged(proc.stdout, "MISSING")
    assert "pip install tensorflow" in message


def test_importing_tfdiag_magic_does_not_import_tensorflow(tmp_path):
    code = (
        "import sys, tfdiag_magic\n"
        "from tfdiag_magic import step, profile\n"
        "print('LOADED=' + ','.join(m for m in ('tensorflow', 'keras') if m in sys.modules))\n"
    )
    proc = _python("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _tagged(proc.stdout, "LOADED") == ""


def test_a_diagnosis_with_nothing_to_rewrite_does_not_import_libcst(tmp_path):
    """libcst, which every rewrite uses, takes half a second to import: the diagnosis of a run
    with no finding to rewrite never loads it (the rules are run on an empty record in a fresh
    interpreter); the first rewrite called does."""
    code = (
        "import sys\n"
        "from tfdiag_magic.diagnose import diagnose, rules\n"
        "from tfdiag_magic.recorder import Recorder\n"
        "from tfdiag_magic import rewrite\n"
        "record = Recorder().finish()\n"
        "record.source = 'for i in range(3):\\n    x = i\\n'\n"
        "print('RULES=%d' % len(rules()))\n"
        "print('FINDINGS=%d' % len(diagnose(record)))\n"
        "print('BEFORE=%s' % ('libcst' in sys.modules))\n"
        "rewrite.larger_batch(record.source, batch_size=64)\n"
        "print('AFTER=%s' % ('libcst' in sys.modules))\n"
    )
    proc = _python("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert int(_tagged(proc.stdout, "RULES")) >= 19
    assert _tagged(proc.stdout, "FINDINGS") == "0"
    assert _tagged(proc.stdout, "BEFORE") == "False"
    assert _tagged(proc.stdout, "AFTER") == "True"


def test_step_marker_without_a_run_does_nothing_and_needs_no_tensorflow(tmp_path):
    code = NO_TENSORFLOW + textwrap.dedent(
        """
        from tfdiag_magic import step
        with step() as s:
            s.loss = 1.0
        print("OK")
        """
    )
    proc = _python("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "OK"


def test_cli_without_tensorflow_exits_2_with_the_install_hint(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n", encoding="utf-8")
    code = NO_TENSORFLOW + (
        f"from tfdiag_magic.cli import main\nraise SystemExit(main(['profile', {str(script)!r}]))\n"
    )
    proc = _python("-c", code, cwd=tmp_path)
    assert "pip install tensorflow" in proc.stderr
    assert "RuntimeError" not in proc.stderr
    assert "ran" not in proc.stdout
    assert proc.returncode == 2


def test_magic_without_tensorflow_is_a_usage_error_and_the_cell_does_not_run(tmp_path):
    code = NO_TENSORFLOW + textwrap.dedent(
        """
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_line_magic("load_ext", "tfdiag_magic")
        result = ip.run_cell("%%tfprofile\\nran = True\\n")
        print("ERROR=" + type(result.error_in_exec).__name__)
        print("RAN=" + str("ran" in ip.user_ns))
        """
    )
    proc = _python("-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _tagged(proc.stdout, "ERROR") == "UsageError"
    assert _tagged(proc.stdout, "RAN") == "False"
    assert "pip install tensorflow" in proc.stdout + proc.stderr
