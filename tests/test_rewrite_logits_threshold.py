"""The rewrite of `metric-on-logits`: a logits model's thresholded metrics set to threshold at 0.

What the rewritten cell measures under Keras is `tests/test_diagnose_metric_on_logits.py`'s;
here, which code it touches: the ``metrics=`` lists of ``compile`` calls whose loss is built
with ``from_logits=True``, and in them only the kinds of metric named.
"""

from __future__ import annotations

from tfdiag_magic.rewrite import threshold_logits_at_zero

TWO_MODELS_CELL = """\
import tensorflow as tf
model.compile(optimizer='adam',
              loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
              metrics=['accuracy', tf.keras.metrics.Recall(thresholds=0.5)])
probabilities.compile("adam", loss="binary_crossentropy", metrics=["accuracy"])
named.compile("adam", loss=loss_fn, metrics=["acc"])
"""


def test_only_the_logits_models_metrics_of_the_named_kinds_are_set_at_zero():
    new = threshold_logits_at_zero(TWO_MODELS_CELL, ("BinaryAccuracy", "Recall"))
    assert new is not None
    compile(new, "<cell>", "exec")
    assert (
        'metrics=[tf.keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0),'
        " tf.keras.metrics.Recall(thresholds=0.0)])" in new
    )
    # A probabilities model, and a loss whose text does not say it reads logits, as they were.
    assert 'probabilities.compile("adam", loss="binary_crossentropy", metrics=["accuracy"])' in new
    assert 'named.compile("adam", loss=loss_fn, metrics=["acc"])' in new
    only_recall = threshold_logits_at_zero(TWO_MODELS_CELL, ("Recall",))
    assert (
        only_recall is not None
        and "metrics=['accuracy', tf.keras.metrics.Recall(thresholds=0.0)]" in only_recall
    )


def test_nothing_to_set_is_no_rewrite():
    assert threshold_logits_at_zero(TWO_MODELS_CELL, ("Precision",)) is None
    cell = (
        "import keras\n"
        "m.compile('adam', loss=keras.losses.BinaryCrossentropy(from_logits=True),"
        " metrics=METRICS)\n"
    )
    assert threshold_logits_at_zero(cell) is None
