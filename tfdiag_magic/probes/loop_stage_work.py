"""Where the work of a loop's tf.data pipeline goes: each stage's own time per batch, read from
the runtime model of the iterator a loop of the cell draws its batches from.

`fit` and a function given its iterator have theirs read by the input meter (`input_meter`),
which reads the model anyway for its wait measure. A loop over a dataset in the cell
(``for xb, yb in train_ds:``, ``for step, batch in enumerate(train_ds):``) times each ``next()``
itself, so nothing read the model there. Here it is read where the recorder writes the loop's
rows in a batch (every 64 iterations or 0.25 s, on the loop's own thread, after its iterator
handed out an item: no ``GetNext`` runs then), from the iterator's 8th item on, then at twice
the items of the last read, up to every 1024 items: a few reads an epoch at about 45 µs each
(a 7-stage pipeline here), and nothing added to an iteration. A loop shorter than 64 items and
0.25 s is not read: it waited too little for `input-bound` to matter. The last model read whole
is kept (an iterator that ran out drops its inputs' nodes, so a model with fewer nodes does not
replace it) and turned into facts once, after the run.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..record import InputStageWork
from .input_meter import stage_work

FIRST_READ = 8  # items of an iterator before its model is first read
MOST_BETWEEN_READS = 1024


class LoopStageReader:
    """Reads the runtime model of the iterator one loop of the cell draws from (the loop's
    latest; each run of the loop follows its new iterator), keeping the last one read whole."""

    __slots__ = ("_model", "_owned", "_read_at")

    def __init__(self) -> None:
        self._owned: Any = None  # a weak reference to the tf.data iterator, or None
        self._read_at = FIRST_READ
        self._model: Any = None

    def follow(self, iterator: Any) -> bool:
        """Follow the loop's new iterator; False where it is not fed by one tf.data iterator."""
        owned = tf_data_iterator(iterator)
        if owned is None:
            self._owned = None
            return False
        self._owned = weakref.ref(owned)
        self._read_at = FIRST_READ
        return True

    def due(self, items: int) -> None:
        """The loop's rows are being written, `items` items into this run of it: the model is
        read when it is time."""
        if self._owned is None or items < self._read_at:
            return
        self._read_at = min(2 * items, items + MOST_BETWEEN_READS)
        owned = self._owned()
        if owned is None:
            self._owned = None
            return
        import tensorflow as tf

        try:
            model = tf.data.experimental.get_model_proto(owned)
            nodes = len(model.nodes)
        except Exception:  # autotune off for this dataset: there is no model to read
            self._owned = None
            return
        if self._model is None or nodes >= len(self._model.nodes):
            self._model = model

    def stages(self) -> tuple[InputStageWork, ...]:
        """The stages of the last model read whole (after the run); () if none was read."""
        return stage_work(self._model) if self._model is not None else ()


def tf_data_iterator(iterator: Any) -> Any:
    """The tf.data iterator (`OwnedIterator`) a loop's iterator is, or that an ``enumerate``
    over one wraps (its ``__reduce__`` gives the wrapped iterator without advancing it); None
    otherwise: nothing else of the code's is looked into."""
    try:
        from tensorflow.python.data.ops import iterator_ops

        if type(iterator) is enumerate:
            iterator = iterator.__reduce__()[1][0]
        return iterator if isinstance(iterator, iterator_ops.OwnedIterator) else None
    except Exception:
        return None
