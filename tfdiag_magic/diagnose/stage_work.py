"""Where a tf.data pipeline's work goes, per batch: each stage's own processing time as the
iterator's runtime (autotune) model measured it during the run (`record.InputStageWork`), with
the maps matched to the functions the pipeline's make-up names (`record.DatasetStructure`).

The runtime model names what tf.data ran after its own rewrites (`ParallelMapV2` for a map it
parallelised, `MapAndBatch` for a map fused with its batch), so a map is named by its function
only where the runtime's maps and the pipeline's, each taken depth first from the output, are
as many: tf.data's default rewrites neither add nor drop a map.
"""

from __future__ import annotations

from typing import Any

from ..record import DatasetStructure, InputStageWork
from ..units import seconds
from .dataset_facts import describe_stage
from .evidence import rounded

_RUNTIME_MAPS = frozenset({"Map", "ParallelMap", "ParallelMapV2", "MapAndBatch"})
_STRUCTURE_MAPS = frozenset({"MapDataset", "ParallelMapDataset", "MapAndBatchDataset"})
MIN_SHARE_NAMED = 0.05  # a stage named in the text does at least this share of the work
NAMED_MOST = 3
KEPT_MOST = 6  # stages in the evidence


def stage_work(
    stages: tuple[InputStageWork, ...], structure: DatasetStructure | None
) -> list[dict[str, Any]]:
    """The pipeline's stages that did work, the most per batch first: tf.data's name for each,
    what the code made it (a map's function, where matched), seconds per batch and per
    element, elements per batch, and its parallelism; [] where the model was not read."""
    if not stages or stages[0].name != "Root" or stages[0].elements <= 0:
        return []
    batches = stages[0].elements
    runtime_maps = [s for s in stages if s.name in _RUNTIME_MAPS]
    made = {}
    if structure is not None and structure.complete:
        maps = [s for s in structure.stages if s.kind in _STRUCTURE_MAPS]
        if len(maps) == len(runtime_maps):
            made = {id(work): stage for work, stage in zip(runtime_maps, maps, strict=True)}
    rows = []
    for work in stages[1:]:
        if work.seconds <= 0:
            continue
        stage = made.get(id(work))
        rows.append(
            {
                "stage": work.name,
                "made_as": describe_stage(stage) if stage is not None else "",
                "library": stage is not None and stage.library,
                "s_per_batch": work.seconds / batches,
                "elements_per_batch": work.elements / batches,
                "s_per_element": work.seconds / work.elements if work.elements else None,
                "parallelism": work.parallelism,
            }
        )
    rows.sort(key=lambda row: -row["s_per_batch"])
    return rows


def work_evidence(rows: list[dict[str, Any]], batches: int) -> dict[str, Any]:
    """The evidence's fields: the work per batch and its largest stages, rounded."""
    return {
        "stage_work_s_per_batch": rounded(sum(row["s_per_batch"] for row in rows)),
        "stage_work_batches": batches,
        "stage_work": [
            {
                **row,
                "s_per_batch": rounded(row["s_per_batch"]),
                "elements_per_batch": rounded(row["elements_per_batch"], 3),
                "s_per_element": rounded(row["s_per_element"]),
            }
            for row in rows[:KEPT_MOST]
        ],
    }


def work_sentence(rows: list[dict[str, Any]], batches: int) -> str:
    """Where the work goes, in a sentence ("" with nothing measured)."""
    total = sum(row["s_per_batch"] for row in rows)
    if total <= 0:
        return ""
    named = [row for row in rows[:NAMED_MOST] if row["s_per_batch"] >= MIN_SHARE_NAMED * total]
    parts = []
    for row in named:
        what = "a " + row["made_as"] if row["made_as"] else f"`{row['stage']}`"
        per = row["elements_per_batch"]
        each = (
            f", {per:.3g} elements of {seconds(row['s_per_element'])} each"
            if per >= 1.5 and row["s_per_element"]
            else ""
        )
        share = row["s_per_batch"] / total
        parts.append(f"{seconds(row['s_per_batch'])} ({share:.0%}) in {what}{each}")
    return (
        f"The iterator's runtime model measured its stages' own work at {seconds(total)} a"
        f" batch over its last {batches} batches (summed over their threads)"
        + (": " + "; ".join(parts) if parts else "")
        + "."
    )


def library_share(rows: list[dict[str, Any]]) -> float:
    """The share of the measured work done in maps the library made itself (a Keras utility's
    windows or loader): work no option of the code's maps can reach."""
    total = sum(row["s_per_batch"] for row in rows)
    own = sum(row["s_per_batch"] for row in rows if row["library"])
    return own / total if total > 0 else 0.0
