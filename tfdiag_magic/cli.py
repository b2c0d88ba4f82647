"""Command line: ``python -m tfdiag_magic profile SCRIPT.py``, ``demo`` and ``gpu``.

``profile`` runs a script as ``__main__`` under the same instrumentation as ``%%tfprofile``
(its top-level loops included), prints the text report and writes the JSON report. It exits 0
when the script completed and 1 when it raised; the report is written either way.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
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
        help="where to write the JSON report (default: SCRIPT.tfdiag.json)",
    )
    run.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report")
    run.add_argument(
        "--no-loops",
        action="store_true",
        help="do not record the iterations of the script's top-level loops",
    )
    demo = sub.add_parser("demo", help="profile the bundled example with a known problem")
    demo.add_argument(
        "--html",
        metavar="PATH",
        default=None,
        help="where to write the HTML report (default: a temporary folder)",
    )
    demo.add_argument("--json", metavar="PATH", default=None, help="also write the JSON report")
    explain = sub.add_parser("explain", help="print the documentation of a finding code")
    explain.add_argument("code", nargs="?", help="a finding code; without one, list the codes")
    gpu = sub.add_parser("gpu", help="the GPU doctor: can TensorFlow use the GPU, and if not, why")
    gpu.add_argument("--json", metavar="PATH", default=None, help="also write the JSON report")
    return parser


def explain_code(code: str | None) -> int:
    """Print a finding's documentation (or the list of codes); 2 for an unknown code."""
    from .diagnose import UnknownCodeError, explain, rules

    if not code:
        for rule in rules():
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
        report.to_json(json_path)
        print(f"\nJSON report: {json_path}")
    return 0


def profile_script(
    script: Path, argv: list[str], instrument: bool = True
) -> tuple[ProfileResult, BaseException | None]:
    """Run `script` as ``__main__`` in a session; returns the result and the script's error."""
    from .code_runner import prepare, run
    from .session import Session

    source = script.read_text(encoding="utf-8")
    prepared = prepare(source, str(script), instrument=instrument)
    # A real __main__ module, as runpy and cProfile make: classes the script defines must
    # pickle (multiprocessing, PyDataset workers) as they do when it runs plainly.
    main_module = types.ModuleType("__main__")
    main_module.__file__ = str(script)
    main_module.__builtins__ = __builtins__  # type: ignore[attr-defined]
    main_module.__package__ = None
    main_module.__spec__ = None
    main_module.__loader__ = None
    namespace: dict[str, Any] = main_module.__dict__
    saved_main = sys.modules.get("__main__")
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [str(script), *argv]
    if sys.path:
        sys.path[0] = str(script.parent.resolve())
    session = Session(source=source, loops=prepared.loops, namespace=namespace, label=script.name)
    error: BaseException | None = None
    result = session.start()  # outside the try: a missing TensorFlow is not the script's error
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
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0
    return result, error


def _print_user_traceback(error: BaseException) -> None:
    """Print the script's exception without the profiler's own frames."""
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
    traceback.print_exception(type(error), error, frames[0] if frames else None)


def _report(
    result: ProfileResult, error: BaseException | None, json_path: Path, html_path: Path | None
) -> int:
    if error is not None and not isinstance(error, SystemExit):
        _print_user_traceback(error)
    print(result.summary())
    result.to_json(json_path)
    print(f"\nJSON report: {json_path}")
    if html_path is not None:
        print(f"HTML report: {result.write_html(html_path)}")
    return 0 if error is None else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "explain":
        return explain_code(args.code)
    if args.command == "gpu":
        return gpu_doctor(args.json)
    from .tf_runtime import TensorFlowMissingError

    try:
        if args.command == "profile":
            script = Path(args.script)
            if not script.is_file():
                print(f"tfdiag_magic: no such script: {script}", file=sys.stderr)
                return 2
            result, error = profile_script(script, args.args, instrument=not args.no_loops)
            json_path = Path(args.json) if args.json else script.with_suffix(".tfdiag.json")
            html_path = Path(args.html) if args.html else None
            return _report(result, error, json_path, html_path)
        # demo: TensorFlow's C++ start-up lines would bury the report
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        out_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "tfdiag_magic"
        html_path = Path(args.html) if args.html else out_dir / "demo-report.html"
        json_path = Path(args.json) if args.json else html_path.with_suffix(".json")
        json_path.parent.mkdir(parents=True, exist_ok=True)
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
