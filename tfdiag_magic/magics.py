"""The IPython layer: parses ``%%tfprofile`` options, runs the cell in a session, shows the result.

No measuring and no analysis here: the session records, the views render.
"""

from __future__ import annotations

import contextlib
import keyword
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from . import active
from .code_runner import cell_source, prepare, run
from .result import ProfileResult

_VALUE_OPTIONS = {
    "-o",
    "--output",
    "--json",
    "--html",
    "--memory-interval",
    "--explain",
    "--compare",
    "--sweep",
}
AUTO_NAME = "_tfprofile_{}"  # where a run with a rewrite is kept for --compare when no -o is given
MAX_AUTO_RESULTS = 3  # automatic results kept; older ones are deleted from the namespace


def split_line(line: str) -> tuple[str, str]:
    """Split ``%tfprofile [options] statement`` into the option text and the statement."""
    rest = line.strip()
    options: list[str] = []
    while rest.startswith("-"):
        head, _, tail = rest.partition(" ")
        options.append(head)
        rest = tail.lstrip()
        if head in _VALUE_OPTIONS and rest:
            value, _, tail = rest.partition(" ")
            options.append(value)
            rest = tail.lstrip()
    return " ".join(options), rest


@magics_class
class TFProfileMagics(Magics):
    """``%%tfprofile``: run a training cell unchanged and record every step."""

    last_result: ProfileResult | None = None

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell, **kwargs)
        # The automatic `_tfprofile_<N>` results this shell holds, oldest first.
        self.automatic: dict[str, ProfileResult] = {}

    @magic_arguments()
    @argument(
        "-o",
        "--output",
        metavar="NAME",
        help="store the ProfileResult in the variable NAME (like %%timeit -o)",
    )
    @argument(
        "-q",
        "--quiet",
        action="store_true",
        help="do not show the report (the cell's own output and value are unaffected)",
    )
    @argument(
        "--explain",
        metavar="CODE",
        help="print the documentation of a finding code (e.g. retracing) and run nothing",
    )
    @argument(
        "--compare",
        metavar="NAME",
        help="compare this run with the ProfileResult in NAME (stored earlier with -o NAME): "
        "speed, time split, peak memory, findings resolved and new; the result's .comparison",
    )
    @argument(
        "--sweep",
        metavar="NAME=V1,V2,...",
        nargs="+",
        help="run the cell once per value with the variable NAME set to it (the cell's own "
        "top-level assignment to NAME is overridden); values are Python literals or bare "
        "words; the result's .sweep is a table of the runs, .recommendation the fastest value "
        "that completed",
    )
    @argument("--json", metavar="PATH", help="also write the JSON report (schema 1) to PATH")
    @argument("--html", metavar="PATH", help="also write a self-contained HTML report to PATH")
    @argument(
        "--no-loops",
        action="store_true",
        help="do not record the iterations of the cell's for/while loops (its functions' too)",
    )
    @argument(
        "--ops",
        action="store_true",
        help="also record TensorFlow's own profiler trace over a few steady steps (after 5 "
        "steps, for up to 20 steps or 1.5 s): where inside the step the time went (input, "
        "host ops, device ops, collectives, the rest), the top ops and Keras layers; the "
        "result's .ops",
    )
    @argument(
        "--memory-interval",
        metavar="SECONDS",
        type=float,
        default=0.05,
        help="seconds between samples of host and GPU memory (default 0.05)",
    )
    @line_cell_magic
    def tfprofile(self, line: str, cell: str | None = None) -> Any:
        """Profile TensorFlow/Keras training: run the cell as usual and record every step.

        Cell mode::

            %%tfprofile [options]
            model.fit(x, y, epochs=3)

        Line mode profiles one statement: ``%tfprofile [options] model.fit(x, y)``.

        Steps come from Keras fit/evaluate/predict batches, ``*_on_batch`` calls, the cell's
        calls of tf.functions, eager optimizer updates (GradientTape loops), ``with step():``
        markers (``from tfdiag_magic import step``), and the iterations of the cell's
        for/while loops (those of the functions and methods it defines too), with the time
        spent waiting for their next item; ``next()`` on a tf.data iterator is timed wherever
        the cell calls it.

        The report shows step counts per phase, steady-state step times, the time split
        (compute / data wait / other), memory, tf.function tracing, GC pauses and warnings.

        Verify a fix: ``%%tfprofile -o before`` on the cell, then ``%%tfprofile --compare before``
        on the changed cell; ``.comparison.verdict`` says what changed and by which measure. A
        finding's rewritten cell, inserted from the report, already starts with that line (a run
        without -o is kept as ``_tfprofile_<N>`` for it). Sweep a variable:
        ``%%tfprofile --sweep batch_size=16,64,256 -o sweep``; ``sweep.sweep`` is the table,
        ``sweep.recommendation`` the fastest value that completed. In line mode the
        specification must not contain spaces.
        """
        __tracebackhide__ = True
        if cell is None:
            option_text, code = split_line(line)
            if not code and "--explain" not in option_text.split():
                raise UsageError(
                    "%tfprofile needs a statement to profile, or use %%tfprofile "
                    "as a cell magic. See %tfprofile?"
                )
        else:
            option_text, code = line, cell
        args = parse_argstring(self.tfprofile, option_text)
        if args.explain:
            from .diagnose import UnknownCodeError, explain

            try:
                print(explain(args.explain))
            except UnknownCodeError as exc:
                raise UsageError(str(exc)) from None
            return None
        if args.output is not None and (
            not args.output.isidentifier() or keyword.iskeyword(args.output)
        ):
            raise UsageError(f"-o needs a valid variable name; got {args.output!r}")
        if args.memory_interval <= 0:
            raise UsageError("--memory-interval must be a positive number of seconds")
        spec = None
        if args.sweep:
            from .experiments.sweep_spec import SweepSpecError, parse_sweep_spec

            try:
                spec = parse_sweep_spec(" ".join(args.sweep))
            except SweepSpecError as exc:
                raise UsageError(f"{exc} Nothing was run.") from None
            if args.compare is not None:
                raise UsageError(
                    "--sweep and --compare cannot be combined: compare a run of the "
                    "recommended value instead. Nothing was run."
                )
        baseline = self._baseline(args.compare) if args.compare is not None else None
        if active.recorder() is not None:
            raise UsageError(
                "%%tfprofile is already running: profiling runs cannot nest, so this inner "
                "cell was not run. Remove the inner %%tfprofile."
            )
        header = line if cell is not None else None
        if spec is not None:
            return self._sweep(code, header, args, spec)
        return self._profile(code, header, args, baseline)

    def _baseline(self, name: str) -> ProfileResult:
        """The earlier result that ``--compare NAME`` names; a UsageError when there is none."""
        if not name.isidentifier() or keyword.iskeyword(name):
            raise UsageError(f"--compare needs a variable name; got {name!r}. Nothing was run.")
        if name not in self.shell.user_ns:
            raise UsageError(
                f"--compare {name}: there is no variable {name}. Store the run to compare "
                f"with first: put `%%tfprofile -o {name}` on the original cell and run it. "
                "Nothing was run."
            )
        baseline = self.shell.user_ns[name]
        if not _is_result(baseline):
            raise UsageError(
                f"--compare {name}: {name} holds a value of type {type(baseline).__name__}, not "
                f"the ProfileResult of a %%tfprofile run (store one with -o {name}). "
                "Nothing was run."
            )
        if baseline.record is None:
            raise UsageError(f"--compare {name}: that run has not finished. Nothing was run.")
        return baseline

    def _prepare(self, code: str, header: str | None, args: Any, transform: Any = None) -> Any:
        """Compile the cell as IPython would (magics transformed, loops instrumented)."""
        shell = self.shell
        transformed = shell.transform_cell(code)
        # Line N of the compiled text is line N of the cell (its leading blank lines kept).
        source = cell_source(code, transformed, header)
        filename = shell.compile.cache(source, _running_cell_number(shell), raw_code=source)
        try:
            prepared = prepare(
                source,
                filename,
                instrument=not args.no_loops,
                interactivity=str(getattr(shell, "ast_node_interactivity", "last_expr")),
                compiler=shell.compile,
                transform=transform,
            )
        except SyntaxError as exc:
            if "outside" in str(exc.msg) and "await" in str(exc.msg):
                raise UsageError(
                    "%%tfprofile cannot run top-level `await`; wrap the asynchronous code in a "
                    "function and run it with asyncio, or profile it without await."
                ) from None
            raise
        return prepared, transformed

    def _session(self, code: str, prepared: Any, args: Any, label: str) -> Any:
        """A session for the cell, not started yet (making one installs nothing)."""
        from .session import Session, SessionOptions

        return Session(
            SessionOptions(memory_interval=args.memory_interval, ops=args.ops),
            source=code,
            loops=prepared.loops,
            namespace=self.shell.user_ns,
            label=label,
            filename=prepared.body.co_filename,
            loop_hooks=prepared.hooks,
        )

    def _profile(
        self, code: str, header: str | None, args: Any, baseline: ProfileResult | None = None
    ) -> Any:
        """Run the cell in a session; show the report; return the cell's value or raise its
        exception, unchanged.

        Everything after the session has started is inside the ``try``: whatever stops the
        cell (its own error, an interrupt while the live view starts or inside a step),
        `_finish` removes the probes, releases the recorder and reports what was recorded,
        and never raises itself.
        """
        __tracebackhide__ = True
        shell = self.shell
        prepared, transformed = self._prepare(code, header, args)
        session = self._session(code, prepared, args, args.output or "")
        live = None
        try:
            _start_session(session)
            live = _new_live_view(shell, args)
            live = _attach_live_view(live, session)
            value = run(prepared, shell.user_global_ns, shell.user_ns)
        except BaseException as exc:
            if not session.running:  # it did not start: nothing to remove, nothing to report
                _close_live_view(live)
                raise
            self._finish(session, args, live, exc, baseline)
            raise
        self._finish(session, args, live, None, baseline)
        if value is not None and _ends_with_semicolon(shell, transformed):
            return None  # `expr;` shows nothing, as in any other cell
        return value

    def _finish(
        self,
        session: Any,
        args: Any,
        live: Any,
        error: BaseException | None,
        baseline: ProfileResult | None,
    ) -> None:
        """Every stage after the run, each on its own: a stage that fails (an error, or an
        interrupt) is a line of the report and the next stage still runs. Never raises."""
        result = session.result
        try:
            if live is not None:
                _stage(result, "live view", live.detach, session)
            session.stop(error)  # never raises: its own stages note their failures
            if baseline is not None:
                _stage(result, "comparison", _attach_comparison, result, baseline, args.compare)
            self._publish(result, args, live, error)
        except BaseException as problem:  # between stages: still never the cell's outcome
            with _suppress_all():
                result.add_problem("report", problem)
            if session.running:  # stopped before the probes were out: take them out now
                with _suppress_all():
                    session.stop(error)
            _close_live_view(live)

    def _sweep(self, code: str, header: str | None, args: Any, spec: Any) -> None:
        """Run the cell once per value of the sweep; show and store the table of runs.

        A failing value is a row of the table; an interrupt keeps the rows so far, shows them
        and is raised again; when no value completed, the last error is raised after the report.
        """
        __tracebackhide__ = True
        from .experiments.override import drop_top_level_assignments
        from .experiments.sweep import run_sweep

        shell = self.shell
        overridden: list[int] = []

        def transform(tree: Any) -> None:
            overridden[:] = drop_top_level_assignments(tree, spec.name)

        self._prepare(code, header, args, transform)  # a SyntaxError stops it before any run
        if not _reads_name(shell.transform_cell(code), spec.name):
            print(
                f"tfdiag_magic: the cell never reads {spec.name}: the sweep sets it in the"
                " notebook's namespace, so the runs differ only if something the cell calls"
                f" reads the global {spec.name}.",
                file=sys.stderr,
            )
        # The latest failure only, raised again when no value completed. run_sweep drops the
        # traceback of a failure before the next run, so its frames (a model, its batches)
        # are freed before that run allocates.
        errors: list[BaseException] = []

        def run_one(value: Any) -> tuple[ProfileResult, BaseException | None]:
            __tracebackhide__ = True
            shell.user_ns[spec.name] = value
            prepared, _ = self._prepare(code, header, args, transform)
            session = self._session(code, prepared, args, f"{spec.name}={value!r}")
            try:
                _start_session(session)
                run(prepared, shell.user_global_ns, shell.user_ns)
            except BaseException as exc:
                if not session.running:
                    raise
                session.stop(exc)  # never raises
                errors[:] = [exc]
                return session.result, exc
            session.stop()
            return session.result, None

        def progress(done: Any, index: int) -> None:
            if not args.quiet:
                print(_sweep_progress(spec, done, index), flush=True)

        sweep, stop = run_sweep(spec, run_one, progress, overridden)
        shown = sweep.runs[-1] if sweep.runs else None
        with contextlib.suppress(Exception):  # the recommended run, else the last one
            shown = sweep.shown()
        if shown is None:  # interrupted before the first run had a record
            if stop is not None:
                raise stop
            return None
        result = ProfileResult(label=args.output or "", record=shown.result.record)
        result.findings = shown.result.findings
        result.combined_rewrite = shown.result.combined_rewrite
        result.problems = [*sweep.problems, *shown.result.problems]
        result.experiment = sweep
        failed_all = stop is None and all(run.status != "ok" for run in sweep.runs)
        last_error = errors[-1] if errors else None
        if not failed_all:
            errors.clear()  # not raised: nothing keeps its frames past the report
        self._publish(result, args, None, stop if stop is not None else last_error)
        if stop is not None:
            raise stop
        if failed_all and last_error is not None:
            raise last_error  # nothing completed: show the error as a plain run would
        return None

    def _publish(
        self,
        result: ProfileResult,
        args: Any,
        live: Any = None,
        error: BaseException | None = None,
    ) -> None:
        """Store, write and show the result. Never raises: a stage that fails (an error or an
        interrupt) is a line of the report, and the next stage still runs.

        In a Jupyter kernel with widgets on, the report is the dashboard, in one output with
        the static HTML and text beside it (shown where widgets cannot render); it takes the
        live view's place. Elsewhere the result displays itself (text, static HTML).
        """
        try:
            TFProfileMagics.last_result = result
            _stage(result, "storing the result", self._store, result, args)
            notes = []
            for option, what, write in (
                (args.json, "JSON report", result.to_json),
                (args.html, "HTML report", result.write_html),
            ):
                if option:
                    written = _write_file(result, what, option, write)
                    if written is not None:
                        notes.append(f"{what} written to {written}")
            if not args.quiet:
                if _stage(result, "report view", _show_report, self.shell, result, live, error):
                    for note in notes:
                        print(note)
                else:
                    _show_plain_report(result)
        finally:
            _close_live_view(live)

    def _store(self, result: ProfileResult, args: Any) -> bool:
        """Put the result in the variable of -o (or ``_tfprofile_<N>`` when it has a rewrite)."""
        name = args.output
        automatic = False
        if not name and result.experiment is None and any(f.rewrite for f in result.findings):
            # Kept so that the rewritten cell, inserted with `%%tfprofile --compare NAME` on
            # its first line, has a run to compare with (like IPython's `_N`).
            name = AUTO_NAME.format(_running_cell_number(self.shell))
            automatic = True
        if name:
            self.shell.user_ns[name] = result
            result.stored_as = name
        if automatic:
            self._keep_newest_automatic(name, result)
        return True

    def _keep_newest_automatic(self, name: str, result: ProfileResult) -> None:
        """Keep only the newest MAX_AUTO_RESULTS ``_tfprofile_<N>`` runs in the namespace.

        Each holds a whole record: a cell run fifty times must not keep fifty. A name the user
        has since bound to something else is left alone, and -o results are never touched.
        """
        ns = self.shell.user_ns
        stored = self.automatic
        stored.pop(name, None)
        stored[name] = result
        alive = [n for n, kept in stored.items() if ns.get(n) is kept]
        for old in alive[:-MAX_AUTO_RESULTS]:
            del ns[old]
        self.automatic = {n: stored[n] for n in alive[-MAX_AUTO_RESULTS:]}


def _stage(result: ProfileResult, name: str, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)`; when it fails (an error or an interrupt), None and a line of the
    report: a stage after the run never costs the record or replaces the cell's outcome."""
    try:
        return function(*args)
    except BaseException as error:
        with _suppress_all():
            result.add_problem(name, error)
        return None


def _suppress_all() -> contextlib.AbstractContextManager[None]:
    """Swallow anything (also an interrupt) in the profiler's last-resort bookkeeping."""
    return contextlib.suppress(BaseException)


def _write_file(
    result: ProfileResult, what: str, path: str, write: Callable[[str], Any]
) -> Path | None:
    """Write one report file; a failure is a line on stderr and in the report, not an error."""
    from .files import report_path, write_failure

    try:
        write(path)
    except BaseException as error:
        with _suppress_all():
            line = write_failure(what, path, error)
            result.problems.append(f"{what} file failed: {line}")
            print(f"tfdiag_magic: {line}", file=sys.stderr)
        return None
    return report_path(path)


def _show_plain_report(result: ProfileResult) -> None:
    """The text report when the report view failed; its failure is one of the lines."""
    try:
        print(result.summary())
    except BaseException as error:
        with _suppress_all():
            print(
                f"tfdiag_magic: could not render the report: {type(error).__name__}: {error}",
                file=sys.stderr,
            )
            for problem in result.problems:
                print(f"tfdiag_magic: {problem}", file=sys.stderr)


def _start_session(session: Any) -> None:
    """Start `session` (it cleans up after itself when it cannot start)."""
    from .tf_runtime import TensorFlowMissingError

    try:
        session.start()
    except TensorFlowMissingError as exc:
        raise UsageError(str(exc)) from None


def _is_result(value: Any) -> bool:
    """A ProfileResult, also one made by an earlier copy of this module (after a reload)."""
    return isinstance(value, ProfileResult) or (
        type(value).__name__ == "ProfileResult" and hasattr(value, "record")
    )


def _attach_comparison(result: ProfileResult, baseline: ProfileResult | None, name: str) -> None:
    """Compare `result` with `baseline`; a comparison that fails costs only the comparison."""
    if baseline is None:
        return
    from .experiments.compare import compare

    try:
        result.comparison = compare(baseline, result, name)
    except Exception as exc:
        print(
            f"tfdiag_magic: could not compare with {name}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )


def _reads_name(source: str, name: str) -> bool:
    """Whether `source` reads the variable `name` anywhere (True when it cannot be parsed)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True
    return any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        for node in ast.walk(tree)
    )


def _sweep_progress(spec: Any, run: Any, index: int) -> str:
    from .units import size

    h = run.headline
    head = f"tfdiag_magic sweep {index + 1}/{len(spec.values)}: {spec.name}={run.label}"
    if run.status != "ok":
        message = (h.error or run.status).strip().splitlines()
        return f"{head}: {run.status}: {message[-1][:160] if message else ''}"
    parts = [f"{h.wall_time:.2f} s"]
    if h.throughput is not None:
        parts.append(f"{h.throughput:,.0f} {h.throughput_unit}")
    if h.peak_host is not None:
        parts.append(f"peak host memory {size(h.peak_host)}")
    return f"{head}: " + ", ".join(parts)


def _new_live_view(shell: Any, args: Any) -> Any:
    """A live view, not shown yet, in a kernel with widgets and live on; else None."""
    from .config import settings_of
    from .views.dashboard import in_kernel

    settings = settings_of(shell)
    if args.quiet or not (settings.widgets and settings.live) or not in_kernel(shell):
        return None
    try:
        from .views.live import LiveView

        return LiveView(interval=settings.live_interval)
    except Exception as exc:  # no live view: the run itself goes on
        print(f"tfdiag_magic: no live view: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def _attach_live_view(live: Any, session: Any) -> Any:
    """Show `live` and attach it to the running session; None when it cannot be shown.

    An interrupt here goes to the caller, which still holds `live` and closes it.
    """
    if live is None:
        return None
    try:
        live.show()
        live.attach(session)
        return live
    except Exception as exc:  # no live view: the run itself goes on
        with _suppress_all():
            session.add_listener(None)
        _close_live_view(live)
        print(f"tfdiag_magic: no live view: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def _close_live_view(live: Any) -> None:
    """Close the live view (its ticker thread joined); never raises."""
    if live is not None:
        with _suppress_all():
            live.close()


def _show_report(shell: Any, result: ProfileResult, live: Any, error: BaseException | None) -> bool:
    """Show the report (in the live view's place, if there is one); True once shown."""
    from .config import settings_of
    from .views.dashboard import dashboard_bundle, in_kernel, static_bundle

    if live is not None:
        live.finish(None, error)
    if settings_of(shell).widgets and in_kernel(shell):
        try:
            data, _dashboard = dashboard_bundle(result)
        except Exception as exc:  # the static report still shows, saying why
            print(f"tfdiag_magic: no dashboard: {type(exc).__name__}: {exc}", file=sys.stderr)
            result.add_problem("dashboard", exc)
            data = static_bundle(result)
    elif live is not None:
        data = static_bundle(result)
    else:
        display(result)
        return True
    data = _with_problems(data, result.problems)
    if live is not None:
        live.replace(data)
    else:
        display(data, raw=True)
    return True


def _with_problems(data: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The static views of a display bundle with the profiler's problems in them (the
    views render the report without them)."""
    from .views.present import with_problems_html, with_problems_text

    if not problems:
        return data
    data = dict(data)
    if isinstance(data.get("text/plain"), str):
        data["text/plain"] = with_problems_text(data["text/plain"], problems)
    if isinstance(data.get("text/html"), str):
        data["text/html"] = with_problems_html(data["text/html"], problems)
    return data


def _running_cell_number(shell: Any) -> int:
    """The execution count of the cell being run (IPython may have advanced its counter)."""
    running = getattr(shell.displayhook, "exec_result", None)
    count = getattr(running, "execution_count", None)
    return int(count) if count is not None else int(shell.execution_count)


def _ends_with_semicolon(shell: Any, source: str) -> bool:
    try:
        return bool(shell.displayhook.semicolon_at_end_of_expression(source))
    except Exception:  # tokenize errors on unusual source: treat as no semicolon
        return False


def load(ipython: Any) -> None:
    """Register the magics once; loading again is a no-op."""
    from .config import register

    register(ipython)
    registered = ipython.magics_manager.magics["cell"].get("tfprofile")
    if isinstance(getattr(registered, "__self__", None), TFProfileMagics):
        return
    ipython.register_magics(TFProfileMagics)


def unload(ipython: Any) -> None:
    """Remove the magics that `load` registered (also those of an earlier copy of the module)."""
    manager = ipython.magics_manager
    for kind in ("line", "cell"):
        table = manager.magics[kind]
        function = table.get("tfprofile")
        owner = getattr(function, "__self__", None)
        if owner is not None and type(owner).__name__ == TFProfileMagics.__name__:
            del table["tfprofile"]
    manager.registry.pop(TFProfileMagics.__name__, None)
    from .views.dashboard import close_dashboards

    close_dashboards()
