"""How often ``%%tfprofile --compare`` calls the same cell faster or slower than itself, and how
often it finds a real change, with a CPU hog on one core (``--quiet``: without it).

Run: ``.venv/bin/python benchmarks/compare_noise.py [-n PAIRS]``

Each pair is a baseline run and a compared run of cells from tests/test_compare_noise.py: a
loop of ~0.5 ms train steps, and the same loop with a 4 ms sleep per step against a 5.2 ms one
(steps about 1.25x longer), a 6 ms one (1.4x) and a 10 ms one (2.2x, as the test). Printed per
pair: the verdict, the means' ratio, the ratio of the fastest steps (10th percentile of the
intervals), which decides, and what widens the band: the busier run's CPU wait per step (ms)
and the larger CPU share.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from conftest import start_cpu_hog, stop_cpu_hog  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from test_compare_noise import SAME, SETUP, WAITING  # noqa: E402

CASES = {
    "train steps, same cell": (SAME, SAME),
    "sleep-paced steps, same cell": (WAITING.format(wait=0.004), WAITING.format(wait=0.004)),
    "sleep-paced steps, 1.25x longer": (WAITING.format(wait=0.004), WAITING.format(wait=0.0052)),
    "sleep-paced steps, 1.4x longer": (WAITING.format(wait=0.004), WAITING.format(wait=0.006)),
    "sleep-paced steps, 2.2x longer": (WAITING.format(wait=0.004), WAITING.format(wait=0.010)),
}


def main() -> None:
    pairs = int(sys.argv[sys.argv.index("-n") + 1]) if "-n" in sys.argv else 12
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "tfdiag_magic")
    ip.run_line_magic("config", "TFProfile.live = False")
    if not (ip.run_cell(SETUP).success and ip.run_cell(SAME).success):
        raise SystemExit("set-up failed")
    hog = None if "--quiet" in sys.argv else start_cpu_hog()
    try:
        for name, (before, after) in CASES.items():
            counts = {"faster": 0, "slower": 0, "no measurable change": 0}
            print(f"\n{name} ({pairs} pairs{', CPU hog on one core' if hog else ''})")
            for _ in range(pairs):
                ip.run_cell("%%tfprofile -q -o before\n" + before)
                ip.run_cell("%%tfprofile -q --compare before -o after\n" + after)
                comparison = ip.user_ns["after"].comparison
                band = comparison.band
                verdict = comparison.verdict.split(";")[0]
                kind = next((k for k in counts if k in verdict), "no measurable change")
                counts[kind] += 1
                waits = [
                    run.cpu_wait_per_step
                    for run in (comparison.before, comparison.after)
                    if run.cpu_wait_per_step is not None
                ]
                wait = f"{max(waits) * 1e3:.2f}" if waits else "-"
                shares = [
                    run.cpu_share
                    for run in (comparison.before, comparison.after)
                    if run.cpu_share is not None
                ]
                share = f"{max(shares):.2f}" if shares else "-"
                print(
                    f"  means {band.ratio:.3f}  fastest steps {band.deciding:.3f}"
                    f"  cpu wait {wait}  cpu share {share}  {verdict}"
                )
            print("  " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
    finally:
        if hog is not None:
            stop_cpu_hog(hog)


if __name__ == "__main__":
    main()
