"""Writing your own callbacks: every hook logged, per-batch printing, early stopping, LR schedule.

Modelled on: https://github.com/keras-team/keras-io/blob/master/guides/writing_your_own_callbacks.py
(keras-io, Apache-2.0; the source's authors: Rick Chao, Francois Chollet). Written for
tfdiag_magic's test corpus after that guide's training code, not a copy of its text: the same
one-Dense-layer regression model (RMSprop, learning rate 0.1), a callback that prints at every
hook (fit with validation_split=0.5, evaluate and predict), one that prints the loss after
every train and test batch, early stopping at the minimum loss (patience 0, restoring the best
weights) and a learning-rate schedule set in on_epoch_begin, with the guide's batch sizes and
epoch counts.
Changed: synthetic float32 digits and integer labels from a fixed seed instead of MNIST (same
shapes and dtypes); 500 training and 500 test samples instead of the guide's 1000; seeds
fixed; a last line that prints the optimizers' iteration counts and checksums.
"""

import json

import keras
import numpy as np

keras.utils.set_random_seed(1337)
rng = np.random.default_rng(1337)


def get_model():
    model = keras.Sequential()
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    return model


x_train = rng.integers(0, 256, size=(500, 28, 28), dtype=np.uint8)
y_train = rng.integers(0, 10, size=(500,), dtype=np.uint8)
x_test = rng.integers(0, 256, size=(500, 28, 28), dtype=np.uint8)
y_test = rng.integers(0, 10, size=(500,), dtype=np.uint8)
x_train = x_train.reshape(-1, 784).astype("float32") / 255.0
x_test = x_test.reshape(-1, 784).astype("float32") / 255.0


class CustomCallback(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        print(f"Starting training; got log keys: {list(logs.keys())}")

    def on_train_end(self, logs=None):
        print(f"Stop training; got log keys: {list(logs.keys())}")

    def on_epoch_begin(self, epoch, logs=None):
        print(f"Start epoch {epoch} of training; got log keys: {list(logs.keys())}")

    def on_epoch_end(self, epoch, logs=None):
        print(f"End epoch {epoch} of training; got log keys: {list(logs.keys())}")

    def on_test_begin(self, logs=None):
        print(f"Start testing; got log keys: {list(logs.keys())}")

    def on_test_end(self, logs=None):
        print(f"Stop testing; got log keys: {list(logs.keys())}")

    def on_predict_begin(self, logs=None):
        print(f"Start predicting; got log keys: {list(logs.keys())}")

    def on_predict_end(self, logs=None):
        print(f"Stop predicting; got log keys: {list(logs.keys())}")

    def on_train_batch_begin(self, batch, logs=None):
        print(f"...Training: start of batch {batch}; got log keys: {list(logs.keys())}")

    def on_train_batch_end(self, batch, logs=None):
        print(f"...Training: end of batch {batch}; got log keys: {list(logs.keys())}")

    def on_test_batch_begin(self, batch, logs=None):
        print(f"...Evaluating: start of batch {batch}; got log keys: {list(logs.keys())}")

    def on_test_batch_end(self, batch, logs=None):
        print(f"...Evaluating: end of batch {batch}; got log keys: {list(logs.keys())}")

    def on_predict_batch_begin(self, batch, logs=None):
        print(f"...Predicting: start of batch {batch}; got log keys: {list(logs.keys())}")

    def on_predict_batch_end(self, batch, logs=None):
        print(f"...Predicting: end of batch {batch}; got log keys: {list(logs.keys())}")


model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=128,
    epochs=1,
    verbose=0,
    validation_split=0.5,
    callbacks=[CustomCallback()],
)
res = model.evaluate(x_test, y_test, batch_size=128, verbose=0, callbacks=[CustomCallback()])
res = model.predict(x_test, batch_size=128, callbacks=[CustomCallback()])
logged = model


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        print(f"Up to batch {batch}, the average loss is {logs['loss']:7.2f}.")

    def on_test_batch_end(self, batch, logs=None):
        print(f"Up to batch {batch}, the average loss is {logs['loss']:7.2f}.")

    def on_epoch_end(self, epoch, logs=None):
        print(
            f"The average loss for epoch {epoch} is {logs['loss']:7.2f} "
            f"and mean absolute error is {logs['mean_absolute_error']:7.2f}."
        )


model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=128,
    epochs=2,
    verbose=0,
    callbacks=[LossAndErrorPrintingCallback()],
)
res = model.evaluate(
    x_test, y_test, batch_size=128, verbose=0, callbacks=[LossAndErrorPrintingCallback()]
)
printing = model


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        self.best_weights = None

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                print("Restoring model weights from the end of the best epoch.")
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")


model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=64,
    epochs=30,
    verbose=0,
    callbacks=[LossAndErrorPrintingCallback(), EarlyStoppingAtMinLoss()],
)
early = model


class CustomLearningRateScheduler(keras.callbacks.Callback):
    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self.model.optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        lr = self.model.optimizer.learning_rate
        scheduled_lr = self.schedule(epoch, lr)
        self.model.optimizer.learning_rate = scheduled_lr
        print(f"\nEpoch {epoch}: Learning rate is {float(np.array(scheduled_lr))}.")


LR_SCHEDULE = [
    (3, 0.05),
    (6, 0.01),
    (9, 0.005),
    (12, 0.001),
]


def lr_schedule(epoch, lr):
    if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
        return lr
    for i in range(len(LR_SCHEDULE)):
        if epoch == LR_SCHEDULE[i][0]:
            return LR_SCHEDULE[i][1]
    return lr


model = get_model()
model.fit(
    x_train,
    y_train,
    batch_size=64,
    epochs=15,
    verbose=0,
    callbacks=[LossAndErrorPrintingCallback(), CustomLearningRateScheduler(lr_schedule)],
)

print(
    "CORPUS_RESULT "
    + json.dumps(
        {
            "steps": {
                "every_hook": int(logged.optimizer.iterations),
                "printing": int(printing.optimizer.iterations),
                "early_stopping": int(early.optimizer.iterations),
                "lr_schedule": int(model.optimizer.iterations),
            },
            "values": {
                "every_hook": sum(float(np.sum(w)) for w in logged.get_weights()),
                "printing": sum(float(np.sum(w)) for w in printing.get_weights()),
                "early_stopping": sum(float(np.sum(w)) for w in early.get_weights()),
                "lr_schedule": sum(float(np.sum(w)) for w in model.get_weights()),
                "learning_rate": float(model.optimizer.learning_rate.numpy()),
                "evaluated": [float(v) for v in res],
            },
        }
    )
)
