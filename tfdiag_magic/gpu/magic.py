"""The IPython layer of the GPU doctor: parses ``%tfgpu`` options and shows the answer.

No fact reading and no diagnosis here: `report`, `memory_growth` and `watch` do that. Text in
a terminal, HTML and a live widget in a notebook.
"""

from __future__ import annotations

import keyword
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from ..config import in_kernel
from .watch import DEFAULT_INTERVAL, MIN_INTERVAL


@magics_class
class GPUMagics(Magics):
    """``%tfgpu``: why TensorFlow does or does not use the GPU, with the fixes."""

    @magic_arguments()
    @argument(
        "-o",
        "--output",
        metavar="NAME",
        help="also store the GPUReport in the variable NAME",
    )
    @argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="print the report as JSON instead of showing it; with PATH, also write it there",
    )
    @argument(
        "--watch",
        nargs="?",
        const=DEFAULT_INTERVAL,
        type=float,
        metavar="SECONDS",
        help="show utilization and memory per GPU (and of the host), updated every SECONDS "
        f"(default {DEFAULT_INTERVAL:g}) from a background thread while other cells run",
    )
    @argument("--stop", action="store_true", help="stop the --watch sampler")
    @argument(
        "--memory-growth",
        action="store_true",
        help="turn memory growth on for every GPU if TensorFlow's runtime is not initialised "
        "yet; otherwise say how to do it after a restart",
    )
    @line_magic
    def tfgpu(self, line: str = "") -> None:
        """The GPU doctor: can TensorFlow use the GPU, and if not, why not and what to do.

        ``%tfgpu`` prints a verdict first, then the problems found with their fixes (CPU-only
        build, missing CUDA libraries, driver too old, CUDA_VISIBLE_DEVICES hiding the GPUs,
        memory growth off, PCIe link below its maximum, other processes on the GPU, throttled
        clocks, mixed precision), then the facts: TensorFlow's build and devices, the
        environment variables that matter, and what the NVIDIA driver (NVML) reports per GPU.
        Reading the facts never initialises TensorFlow's runtime.

        ``%tfgpu --watch [SECONDS]`` keeps a live view of utilization and memory;
        ``%tfgpu --stop`` ends it. ``%tfgpu --memory-growth`` turns memory growth on.
        """
        args = parse_argstring(self.tfgpu, line)
        report_options = args.output is not None or args.json is not None
        modes = [
            name
            for name, used in (
                ("--watch", args.watch is not None),
                ("--stop", args.stop),
                ("--memory-growth", args.memory_growth),
            )
            if used
        ]
        if len(modes) > 1 or (modes and report_options):
            chosen = modes + (["-o/--json"] if report_options else [])
            raise UsageError(
                f"%tfgpu: {' and '.join(chosen)} cannot be combined; use one at a time "
                "(see %tfgpu?)"
            )
        if args.output is not None and (
            not args.output.isidentifier() or keyword.iskeyword(args.output)
        ):
            raise UsageError(f"-o needs a valid variable name; got {args.output!r}")
        if args.watch is not None:
            if not args.watch >= MIN_INTERVAL:
                raise UsageError(
                    f"--watch needs an interval of at least {MIN_INTERVAL:g} seconds; "
                    f"got {args.watch:g}"
                )
            return self._watch(args.watch)
        if args.stop:
            return self._stop()
        if args.memory_growth:
            return self._memory_growth()
        return self._report(args)

    def _report(self, args: Any) -> None:
        from .report import collect_report

        report = collect_report()
        if args.output:
            self.shell.user_ns[args.output] = report
        if args.json is None:
            display(report)
            return
        text = report.to_json()
        if args.json == "-":
            print(text)
            return
        report.to_json(args.json)
        display(report)
        print(f"JSON report written to {args.json}")

    def _memory_growth(self) -> None:
        from .memory_growth import enable_memory_growth
        from .tensorflow_facts import try_import_tensorflow

        tf, error = try_import_tensorflow()
        if tf is None:
            raise UsageError(f"%tfgpu --memory-growth needs TensorFlow: {error}")
        print(enable_memory_growth(tf).text())

    def _watch(self, interval: float) -> None:
        from .watch import start_watch

        watch, view = start_watch(interval, widget=in_kernel(self.shell))
        if view is not None:
            display(view.widget)
        else:
            print(
                f"%tfgpu --watch: sampling every {interval:g} s in the background "
                f"({watch.nvml_status}); %tfgpu --stop ends it and prints a summary."
            )

    def _stop(self) -> None:
        from .watch import stop_watch

        watch = stop_watch()
        if watch is None:
            print("%tfgpu --stop: no watch is running.")
            return
        print(watch.summary())


def load(ipython: Any) -> None:
    """Register ``%tfgpu`` once; loading again is a no-op."""
    registered = ipython.magics_manager.magics["line"].get("tfgpu")
    if isinstance(getattr(registered, "__self__", None), GPUMagics):
        return
    ipython.register_magics(GPUMagics)


def unload(ipython: Any) -> None:
    """Stop a running watch and remove ``%tfgpu`` (also one an earlier copy registered)."""
    from .watch import stop_watch

    stop_watch()
    manager = ipython.magics_manager
    table = manager.magics["line"]
    owner = getattr(table.get("tfgpu"), "__self__", None)
    if owner is not None and type(owner).__name__ == GPUMagics.__name__:
        del table["tfgpu"]
    manager.registry.pop(GPUMagics.__name__, None)
