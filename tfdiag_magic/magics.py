"""The IPython layer: parses ``%%tfprofile`` options, runs the cell in a session, shows the result.

No measuring and no analysis here: the session records, the views render.
"""

from __future__ import annotations

import keyword
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from . import active
from .code_runner import prepare, run
from .result import ProfileResult

_VALUE_OPTIONS = {"-o", "--output", "--json", "--html", "--memory-interval", "--explain"}


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
    @argument("--json", metavar="PATH", help="also write the JSON report (schema 1) to PATH")
    @argument("--html", metavar="PATH", help="also write a self-contained HTML report to PATH")
    @argument(
        "--no-loops",
        action="store_true",
        help="do not record the iterations of the cell's own for/while loops",
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
        markers (``from tfdiag_magic import step``), and the iterations of the cell's own
        for/while loops, with the time spent waiting for their next item.

        The report shows step counts per phase, steady-state step times, the time split
        (compute / data wait / other), memory, tf.function tracing, GC pauses and warnings.
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
        if active.recorder() is not None:
            raise UsageError(
                "%%tfprofile is already running: profiling runs cannot nest, so this inner "
                "cell was not run. Remove the inner %%tfprofile."
            )
        return self._profile(code, line if cell is not None else None, args)

    def _profile(self, code: str, header: str | None, args: Any) -> Any:
        __tracebackhide__ = True
        from .session import Session, SessionOptions
        from .tf_runtime import TensorFlowMissingError

        shell = self.shell
        transformed = shell.transform_cell(code)
        # The body starts on the cell's second line: keep tracebacks' line numbers the user's.
        source = transformed if header is None else f"# %%tfprofile {header}\n{transformed}"
        filename = shell.compile.cache(source, _running_cell_number(shell), raw_code=source)
        try:
            prepared = prepare(
                source,
                filename,
                instrument=not args.no_loops,
                interactivity=str(getattr(shell, "ast_node_interactivity", "last_expr")),
                compiler=shell.compile,
            )
        except SyntaxError as exc:
            if "outside" in str(exc.msg) and "await" in str(exc.msg):
                raise UsageError(
                    "%%tfprofile cannot run top-level `await`; wrap the asynchronous code in a "
                    "function and run it with asyncio, or profile it without await."
                ) from None
            raise
        session = Session(
            SessionOptions(memory_interval=args.memory_interval),
            source=code,
            loops=prepared.loops,
            namespace=shell.user_ns,
            label=args.output or "",
        )
        try:
            result = session.start()
        except TensorFlowMissingError as exc:
            raise UsageError(str(exc)) from None
        live = _start_live_view(shell, session, args)
        try:
            value = run(prepared, shell.user_global_ns, shell.user_ns)
        except BaseException as exc:
            if live is not None:
                live.detach(session)
            session.stop(exc)
            self._publish(result, args, live, exc)
            raise
        if live is not None:
            live.detach(session)
        session.stop()
        self._publish(result, args, live)
        if value is not None and _ends_with_semicolon(shell, transformed):
            return None  # `expr;` shows nothing, as in any other cell
        return value

    def _publish(
        self,
        result: ProfileResult,
        args: Any,
        live: Any = None,
        error: BaseException | None = None,
    ) -> None:
        """Store, write and show the result. A failure here never hides the cell's own error.

        In a Jupyter kernel with widgets on, the report is the dashboard, in one output with
        the static HTML and text beside it (shown where widgets cannot render); it takes the
        live view's place. Elsewhere the result displays itself (text, static HTML).
        """
        TFProfileMagics.last_result = result
        if args.output:
            self.shell.user_ns[args.output] = result
        try:
            notes = []
            if args.json:
                result.to_json(args.json)
                notes.append(f"JSON report written to {args.json}")
            if args.html:
                path = result.write_html(args.html)
                notes.append(f"HTML report written to {path}")
            if not args.quiet:
                _show_report(self.shell, result, live, error)
                for note in notes:
                    print(note)
        except Exception as exc:  # a report that cannot be shown must not cost the record
            print(
                f"tfdiag_magic: could not render the report: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
        finally:
            if live is not None:
                live.close()


def _start_live_view(shell: Any, session: Any, args: Any) -> Any:
    """Show the live view and attach it to the session, in a kernel with widgets and live on."""
    from .config import settings_of
    from .views.dashboard import in_kernel

    settings = settings_of(shell)
    if args.quiet or not (settings.widgets and settings.live) or not in_kernel(shell):
        return None
    try:
        from .views.live import LiveView

        live = LiveView(interval=settings.live_interval)
        live.show()
        session.add_listener(live.on_sample)
        return live
    except Exception as exc:  # no live view: the run itself goes on
        print(f"tfdiag_magic: no live view: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def _show_report(shell: Any, result: ProfileResult, live: Any, error: BaseException | None) -> None:
    from .config import settings_of
    from .views.dashboard import dashboard_bundle, in_kernel, static_bundle

    if live is not None:
        live.finish(None, error)
    if settings_of(shell).widgets and in_kernel(shell):
        try:
            data, _dashboard = dashboard_bundle(result)
        except Exception as exc:  # the static report still shows
            print(f"tfdiag_magic: no dashboard: {type(exc).__name__}: {exc}", file=sys.stderr)
            data = static_bundle(result)
    elif live is not None:
        data = static_bundle(result)
    else:
        display(result)
        return
    if live is not None:
        live.replace(data)
    else:
        display(data, raw=True)


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
