"""Command line: ``python -m tfdiag_magic profile SCRIPT.py``, ``merge``, ``demo`` and ``gpu``.

``profile`` runs a script as ``python SCRIPT.py`` would (``__main__``, ``__file__``, ``sys.argv``,
``sys.path[0]``), under the same instrumentation as ``%%tfprofile`` (the loops of its top level
and of its functions and methods included), prints the text report and writes the JSON report.
It exits with the status and the message Python would (``sys.exit`` codes, 1 and the traceback
for an exception, 130 for an interrupt); the report is written however the script ended.
"""

from __future__ import annotations

import argparse
import builtins
import importlib.machinery
import os
import sys
import tokenize
import types
from pathlib import Path
from typing import Any

from .result import ProfileResult

DEMO_SCRIPT = Path(__file__).with_name("examples") / "retracing_demo.py"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tfdiag_magic", description="Profile TensorFlow/Keras training."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("profile", help="run a script under the profiler and report")
    run.add_argument("script", help="the Python script to run as __main__")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    run.add_argument(
        "--json",
        metavar="PATH",
        help="where to write the JSON report: a file, or a folder (ending in /) to write"
        " SCRIPT.tfdiag.json in, SCRIPT.worker-N.tfdiag.json for a worker of a multi-worker job"
        " (default: beside the script)",
    )
    run.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report")
    run.add_argument(
        "--tensorboard",
        metavar="LOGDIR",
        help="also write the per-step series as TensorBoard"
        " scalars (tfdiag/step_time_s, tfdiag/loss...) to an event file in LOGDIR",
    )
    run.add_argument(
        "--chrome-trace",
        metavar="PATH",
        help="also write the run's timeline as Trace Event"
        " JSON, for ui.perfetto.dev or chrome://tracing",
    )
    run.add_argument(
        "--no-loops",
        action="store_true",
        help="do not record the iterations of the script's loops (its functions' included)",
    )
    run.add_argument(
        "--ops",
        action="store_true",
        help="also record TensorFlow's own profiler trace over a few steady steps: where"
        " inside the step the time went, the top ops and Keras layers",
    )
    demo = sub.add_parser("demo", help="profile the bundled example with a known problem")
    demo.add_argument(
        "--html",
        metavar="PATH",
        default=None,
        help="where to write the HTML report (default: a temporary folder)",
    )
    demo.add_argument("--json", metavar="PATH", default=None, help="also write the JSON report")
    merge = sub.add_parser(
        "merge", help="merge the JSON reports of a multi-worker job's workers, find stragglers"
    )
    merge.add_argument("reports", nargs="+", help="report files, or folders of *.tfdiag.json")
    merge.add_argument("--json", metavar="PATH", default=None, help="write the merged JSON report")
    merge.add_argument("--html", metavar="PATH", default=None, help="write the merged HTML report")
    merge.add_argument(
        "--chrome-trace",
        metavar="PATH",
        default=None,
        help="write the workers' steps as Trace Event JSON (a process per worker), for "
        "ui.perfetto.dev or chrome://tracing",
    )
    explain = sub.add_parser("explain", help="print the documentation of a finding code")
    explain.add_argument("code", nargs="?", help="a finding code; without one, list the codes")
    gpu = sub.add_parser("gpu", help="the GPU doctor: can TensorFlow use the GPU, and if not, why")
    gpu.add_argument("--json", metavar="PATH", default=None, help="also write the JSON report")
    return parser


def explain_code(code: str | None) -> int:
    """Print a finding's documentation (or the list of codes); 2 for an unknown code."""
    from .diagnose import UnknownCodeError, documented, explain

    if not code:
        for rule in documented():
            print(f"{rule.CODE:28} {rule.TITLE}")
        return 0
    try:
        print(explain(code))
    except UnknownCodeError as exc:
        print(f"tfdiag_magic: {exc}", file=sys.stderr)
        return 2
    return 0


def gpu_doctor(json_path: str | None) -> int:
    """Print the ``%tfgpu`` report; 0 whatever it finds (it is a report, not a check)."""
    from .gpu.report import collect_report

    report = collect_report()
    print(report.text())
    if json_path is not None:
        _write_report("JSON report", Path(json_path), report.to_json)
    return 0


def merge_reports(
    paths: list[str], json_path: str | None, html_path: str | None, trace_path: str | None = None
) -> int:
    """Print the merged report of a job's workers; 2 where a path is no report."""
    from .jobs.merged import merge
    from .jobs.workers import NotAReportError

    try:
        merged = merge(paths)
    except NotAReportError as exc:
        print(f"tfdiag_magic: {exc}", file=sys.stderr)
        return 2
    print(merged.summary())
    if json_path is not None:
        _write_report("JSON report", Path(json_path), merged.to_json)
    if html_path is not None:
        _write_report("HTML report", Path(html_path), merged.write_html)
    if trace_path is not None:
        _write_report("Chrome trace", Path(trace_path), merged.to_chrome_trace)
    return 0


def _launcher_files() -> tuple[str, ...]:
    """The files on the stack below the script that a plain ``python SCRIPT`` has not: runpy's
    (``python -m tfdiag_magic``) and the entry point's (``tfdiag-magic``, a console script)."""
    import runpy

    files = [f"<frozen {runpy.__name__}>", runpy.__file__]
    launcher = getattr(sys.modules.get("__main__"), "__file__", None)
    if launcher:
        files.append(launcher)
    return tuple(files)


def profile_script(
    script: str | os.PathLike[str], argv: list[str], instrument: bool = True, ops: bool = False
) -> tuple[ProfileResult, BaseException | None]:
    """Run `script` as ``python SCRIPT ARGV...`` runs it, in a session.

    Returns the result and what ended the script other than by finishing: its uncaught
    exception, a KeyboardInterrupt, or a SystemExit whose code is not 0 or None (`exit_status`
    gives the status Python would exit with). A SyntaxError is raised before anything runs.
    `sys.argv`, `sys.path` and ``sys.modules["__main__"]`` are the script's while it runs and
    are put back afterwards, however it ended.
    """
    from .code_runner import prepare, run
    from .session import Session, SessionOptions

    given = os.fspath(script)
    # Python joins a relative script path to the working folder, without normalising it, for
    # __file__ and for the filename in tracebacks.
    path = given if os.path.isabs(given) else os.path.join(os.getcwd(), given)
    with tokenize.open(path) as file:  # decoded as Python decodes it: coding cookie, BOM
        source = file.read()
    prepared = prepare(source, path, instrument=instrument)
    main_module = _main_module(path)
    namespace: dict[str, Any] = main_module.__dict__
    session = Session(
        SessionOptions(ops=ops, launcher_files=_launcher_files()),
        source=source,
        loops=prepared.loops,
        namespace=namespace,
        label=os.path.basename(path),
        filename=path,
        loop_hooks=prepared.hooks,
    )
    saved_argv, saved_path, saved_path_items = sys.argv, sys.path, list(sys.path)
    saved_main = sys.modules.get("__main__")
    error: BaseException | None = None
    result = session.start()  # outside the try: a missing TensorFlow is not the script's error
    try:
        sys.argv = [given, *argv]  # argv[0] as typed, as Python leaves it
        # Python puts the script's folder (symbolic links resolved) in place of its own first
        # entry; with -m that entry is the working folder, which a plain run does not search.
        script_folder = os.path.dirname(os.path.realpath(path))
        sys.path[:1] = [script_folder]
        sys.modules["__main__"] = main_module
        try:
            run(prepared, namespace)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = exc
        except BaseException as exc:
            error = exc
        finally:
            session.stop(error)
    finally:
        # The script may have rebound or changed these; the caller gets its own back.
        sys.argv = saved_argv
        sys.path = saved_path
        sys.path[:] = saved_path_items
        if saved_main is None:
            sys.modules.pop("__main__", None)
        else:
            sys.modules["__main__"] = saved_main
    return result, error


PROFILE_OPTIONS = ("--json", "--html", "--tensorboard", "--chrome-trace", "--no-loops", "--ops")


def _note_our_options_after_the_script(script_args: list[str], script: str) -> None:
    """Say, after the report, where an option of ours given after the script went: to the
    script, as everything after its name does (as with `python -m cProfile`)."""
    ours = [
        arg
        for arg in script_args
        if any(arg == option or arg.startswith(option + "=") for option in PROFILE_OPTIONS)
    ]
    if ours:
        print(
            f"tfdiag_magic: {', '.join(ours)} came after the script's name, so the script was"
            " given it (everything after the script's name is the script's); to give it to"
            f" tfdiag_magic, put it before: python -m tfdiag_magic profile {ours[0]} ..."
            f" {script}"
        )  # on stdout, with the report: the script's stderr stays as a plain run leaves it


def _main_module(path: str) -> types.ModuleType:
    """A real ``__main__`` module with the names Python gives a script's.

    As runpy and cProfile make it: classes the script defines must pickle (multiprocessing,
    PyDataset workers) as they do when it runs plainly.
    """
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    module.__package__ = None
    module.__spec__ = None
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    module.__cached__ = None  # type: ignore[attr-defined]
    module.__annotations__ = {}  # the interpreter's __main__ starts with an empty one
    return module


def exit_status(error: BaseException | None) -> int:
    """The status ``python SCRIPT.py`` exits with after `error`; prints what Python prints.

    A SystemExit's int code is the status; None is 0; any other code is printed to stderr and
    the status is 1. An uncaught KeyboardInterrupt is 130 (128 + SIGINT), what a shell shows
    for a Python killed by it.
    """
    if error is None:
        return 0
    if isinstance(error, SystemExit):
        code = error.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    if isinstance(error, KeyboardInterrupt):
        return 130
    return 1


def _print_user_traceback(error: BaseException) -> None:
    """Print the script's exception as Python would, without the profiler's own frames."""
    package = str(Path(__file__).resolve().parent)
    tb = error.__traceback__
    frames = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(package):
            frames.append(tb)
        tb = tb.tb_next
    # Relink the user's frames (a traceback's tb_next is writable) and print from the first.
    for current, following in zip(frames, [*frames[1:], None], strict=True):
        current.tb_next = following
    first = frames[0] if frames else None
    # Through sys.excepthook, as Python does at exit: the default one, or the script's own.
    sys.excepthook(type(error), error.with_traceback(first), first)


def _report(
    result: ProfileResult, error: BaseException | None, json_path: Path, html_path: Path | None
) -> int:
    """Show the script's ending as Python would, then the report; returns the exit status."""
    if error is not None and not isinstance(error, SystemExit):
        _print_user_traceback(error)
    status = exit_status(error)
    sys.stderr.flush()  # the script's ending before the report, also where both go to one file
    # A line of its own, also after output the script left without its newline.
    print(f"\n{result.summary()}")
    _write_report("JSON report", json_path, result.to_json)
    if html_path is not None:
        _write_report("HTML report", html_path, result.write_html)
    return status


def _write_report(what: str, path: Path, write: Any) -> None:
    """Write one report file; a file that cannot be written is one line on stderr, and the
    script's exit status stays the script's own."""
    from .files import report_path, write_failure

    try:
        write(path)
    except OSError as exc:
        print(f"tfdiag_magic: {write_failure(what, path, exc)}", file=sys.stderr)
        return
    gap = "\n" if what.startswith("JSON") else ""  # the JSON line follows the report's text
    print(f"{gap}{what}: {report_path(path)}")


def _worker_suffix(result: ProfileResult) -> str:
    """``.worker-1`` for a worker of a multi-worker job (``facts["worker"]``), else ""."""
    record = result.record
    worker = record.facts.get("worker") if record is not None else None
    return f".{worker['task_type']}-{worker['task_index']}" if worker else ""


def _from_folder(folder: str, given: str | None) -> str | None:
    """`given` (``~`` expanded) as a path from `folder` where it is relative; a trailing
    separator (a folder to write into) is kept."""
    if given is None:
        return None
    expanded = os.path.expanduser(given)
    return expanded if os.path.isabs(expanded) else os.path.join(folder, expanded)


def _output_path(given: str | None, script: Path, worker: str, suffix: str) -> Path:
    """Where a report goes: the path given; in a folder given (an existing one, or a path
    ending in ``/``), or beside the script without one, ``SCRIPT[.worker-N]SUFFIX``: every
    worker of a job run with the same command writes its own file."""
    name = f"{script.stem}{worker}{suffix}"
    if not given:
        return script.with_name(name)
    path = Path(given)
    if given.endswith(("/", os.sep)) or path.is_dir():
        return path / name
    return path


def _syntax_error(error: SyntaxError) -> int:
    """Python's message for a script that does not compile (no traceback header), status 1."""
    # Without the profiler's frames that compiled it: Python shows only where the error is.
    sys.excepthook(type(error), error.with_traceback(None), None)
    print("tfdiag_magic: the script did not compile; nothing was run or profiled.")
    return 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "explain":
        return explain_code(args.code)
    if args.command == "gpu":
        return gpu_doctor(args.json)
    if args.command == "merge":
        return merge_reports(args.reports, args.json, args.html, args.chrome_trace)
    from .tf_runtime import TensorFlowMissingError

    try:
        if args.command == "profile":
            script = Path(args.script)
            if not script.is_file():
                print(f"tfdiag_magic: no such script: {script}", file=sys.stderr)
                return 2
            started_in = os.getcwd()
            try:
                result, error = profile_script(
                    args.script, args.args, instrument=not args.no_loops, ops=args.ops
                )
            except SyntaxError as exc:
                return _syntax_error(exc)
            # Relative paths are the command's: where it started, though the script changed
            # its working folder (`os.chdir` into a run folder, a temporary one).
            if os.getcwd() != started_in:
                script = Path(started_in, script)
                for name in ("json", "html", "tensorboard", "chrome_trace"):
                    setattr(args, name, _from_folder(started_in, getattr(args, name)))
            worker = _worker_suffix(result)
            json_path = _output_path(args.json, script, worker, ".tfdiag.json")
            html_path = None
            if args.html:
                html_path = _output_path(args.html, script, worker, ".tfdiag.html")
            status = _report(result, error, json_path, html_path)
            _note_our_options_after_the_script(args.args, args.script)
            if args.tensorboard:
                _write_report("TensorBoard scalars", Path(args.tensorboard), result.to_tensorboard)
            if args.chrome_trace:
                _write_report("Chrome trace", Path(args.chrome_trace), result.to_chrome_trace)
            return status
        # demo: TensorFlow's C++ start-up lines would bury the report
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        out_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "tfdiag_magic"
        html_path = Path(args.html) if args.html else out_dir / "demo-report.html"
        json_path = Path(args.json) if args.json else html_path.with_suffix(".json")
        print(
            f"Profiling the bundled example {DEMO_SCRIPT.name} "
            "(a custom training loop with a known problem)...\n",
            flush=True,
        )
        result, error = profile_script(DEMO_SCRIPT, [])
        return _report(result, error, json_path, html_path)
    except TensorFlowMissingError as exc:
        print(f"tfdiag_magic: {exc}", file=sys.stderr)
        return 2
