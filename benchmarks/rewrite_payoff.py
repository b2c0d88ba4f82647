"""Real programs' patterns, as written and as a finding's rewrite has them.

Run: ``.venv/bin/python benchmarks/rewrite_payoff.py`` (``ROUNDS=N``, default 3;
``PROGRAMS=replay,stateful`` for some of them).

Each program is profiled once (``python -m tfdiag_magic profile``); the rewrite of the finding
named for it is then run against the program as written, in turns, each in a process of its
own. It prints the findings of the rewritten program, profiled in turn, each run's wall time
(the process's, TensorFlow's import included) and a checksum of the final weights: a rewrite
that keeps the training must train the same weights.

- ``replay``: a deep-Q-learning replay loop, the pattern of many reinforcement-learning
  notebooks: a toy environment in NumPy, a replay memory, and per sampled transition two
  ``model.predict`` calls and a ``model.fit`` of that one sample (`repeated-keras-call`:
  ``predict_on_batch``, ``train_on_batch``).
- ``stateful``: a stateful LSTM of batch 1 fitted four times, its states reset between, as
  time-series tutorials write it (`small-batch`: ``steps_per_execution``).
- ``walkthrough``: TensorFlow's "Custom training: walkthrough" tutorial's training, its code as
  written, on synthetic data of the penguins' shapes: a ``grad`` function, the update and the
  metrics inline in the loop, 201 epochs of 9 batches (`eager-step`: the inline step becomes
  one ``tf.function``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPLAY = '''\
import random
from collections import deque
import numpy as np
import keras
from keras import layers

random.seed(1)
np.random.seed(1)
keras.utils.set_random_seed(1)


class Env:
    """A CartPole-like toy environment."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.state = self.rng.normal(size=4).astype("float32") * 0.05
        self.t = 0
        return self.state

    def step(self, action):
        self.t += 1
        push = 0.02 if action else -0.02
        self.state = (self.state + push + self.rng.normal(size=4) * 0.01).astype("float32")
        return self.state, 1.0, self.t >= 30 or abs(self.state[0]) > 2.4


state_size, action_size = 4, 2
memory = deque(maxlen=2000)
gamma, epsilon, epsilon_min, epsilon_decay = 0.95, 1.0, 0.01, 0.995
model = keras.Sequential([
    keras.Input((state_size,)),
    layers.Dense(24, activation="relu"),
    layers.Dense(24, activation="relu"),
    layers.Dense(action_size),
])
model.compile(loss="mse", optimizer=keras.optimizers.Adam(0.001))


def act(state):
    if np.random.rand() <= epsilon:
        return random.randrange(action_size)
    return int(np.argmax(model.predict(state, verbose=0)[0]))


def replay(batch_size):
    global epsilon
    for state, action, reward, next_state, done in random.sample(memory, batch_size):
        target = reward
        if not done:
            target = reward + gamma * np.amax(model.predict(next_state, verbose=0)[0])
        target_f = model.predict(state, verbose=0)
        target_f[0][action] = target
        model.fit(state, target_f, epochs=1, verbose=0)
    if epsilon > epsilon_min:
        epsilon *= epsilon_decay


env = Env()
for episode in range(6):
    state = env.reset().reshape(1, state_size)
    for t in range(30):
        action = act(state)
        next_state, reward, done = env.step(action)
        next_state = next_state.reshape(1, state_size)
        memory.append((state, action, reward, next_state, done))
        state = next_state
        if done:
            break
    if len(memory) > 8:
        replay(8)
print("checksum", float(sum(abs(w).sum() for w in model.get_weights())))
'''

STATEFUL = """\
import numpy as np
import keras
from keras import layers

keras.utils.set_random_seed(0)
series = np.sin(np.arange(400) / 10.0).astype("float32")
X = series[:-1].reshape(-1, 1, 1)
y = series[1:].reshape(-1, 1)
batch_size = 1
model = keras.Sequential([
    keras.Input(batch_shape=(batch_size, 1, 1)),
    layers.LSTM(8, stateful=True),
    layers.Dense(1),
])
model.compile(loss="mean_squared_error", optimizer="adam")
for i in range(4):
    model.fit(X, y, epochs=1, batch_size=batch_size, verbose=0, shuffle=False)
    model.layers[0].reset_states()
print("checksum", float(sum(abs(w).sum() for w in model.get_weights())))
"""

WALKTHROUGH = """\
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)
rng = np.random.RandomState(0)
labels = rng.randint(0, 3, size=334).astype(np.int64)
centers = np.array([[0.3, 0.6, 0.35, 0.3], [0.35, 0.65, 0.7, 0.35], [0.7, 0.25, 0.6, 0.75]])
features = (centers[labels] + 0.08 * rng.randn(334, 4)).clip(0, 1).astype(np.float32)
ds_train_batch = tf.data.Dataset.from_tensor_slices((features, labels)).skip(66).batch(32)

model = tf.keras.Sequential([
  tf.keras.Input((4,)),
  tf.keras.layers.Dense(10, activation=tf.nn.relu),
  tf.keras.layers.Dense(10, activation=tf.nn.relu),
  tf.keras.layers.Dense(3)
])
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

def loss(model, x, y, training):
  y_ = model(x, training=training)
  return loss_object(y_true=y, y_pred=y_)

def grad(model, inputs, targets):
  with tf.GradientTape() as tape:
    loss_value = loss(model, inputs, targets, training=True)
  return loss_value, tape.gradient(loss_value, model.trainable_variables)

optimizer = tf.keras.optimizers.SGD(learning_rate=0.01)
train_loss_results = []
train_accuracy_results = []
num_epochs = 201
for epoch in range(num_epochs):
  epoch_loss_avg = tf.keras.metrics.Mean()
  epoch_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
  for x, y in ds_train_batch:
    # Optimize the model
    loss_value, grads = grad(model, x, y)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    # Track progress
    epoch_loss_avg.update_state(loss_value)  # Add current batch loss
    epoch_accuracy.update_state(y, model(x, training=True))
  train_loss_results.append(epoch_loss_avg.result())
  train_accuracy_results.append(epoch_accuracy.result())
print("checksum", float(sum(abs(w).sum() for w in model.get_weights())))
"""

# name: (program, the finding whose rewrite is run)
PROGRAMS = {
    "replay": (REPLAY, "repeated-keras-call"),
    "stateful": (STATEFUL, "small-batch"),
    "walkthrough": (WALKTHROUGH, "eager-step"),
}
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def _run(script: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=ENV, check=True
    )
    checksum = next(line for line in done.stdout.splitlines() if line.startswith("checksum"))
    return time.perf_counter() - start, checksum.split()[1]


def _findings(script: Path, report: Path) -> list[dict]:
    """The findings of `script` profiled (``python -m tfdiag_magic profile``)."""
    subprocess.run(
        [sys.executable, "-m", "tfdiag_magic", "profile", "--json", str(report), str(script)],
        capture_output=True,
        env=ENV,
        check=True,
    )
    return json.loads(report.read_text())["findings"]


def compare(name: str, rounds: int) -> None:
    """Profile the program `name`, then time it and its finding's rewrite in turns."""
    program, code = PROGRAMS[name]
    with tempfile.TemporaryDirectory() as folder:
        plain = Path(folder) / f"{name}.py"
        plain.write_text(program)
        findings = _findings(plain, Path(folder) / f"{name}.json")
        finding = next((f for f in findings if f["code"] == code), None)
        print(f"## {name}: {finding['title'] if finding else f'no {code} finding'}")
        if finding is None or not finding.get("rewrite"):
            return
        print(finding["diff"])
        rewritten = Path(folder) / f"{name}_rewritten.py"
        rewritten.write_text(finding["rewrite"])
        for left in _findings(rewritten, Path(folder) / f"{name}_rewritten.json"):
            print(f"rewritten, profiled: {left['code']}: {left['title']}")
        times: dict[str, list[float]] = {"as written": [], "rewritten": []}
        for _ in range(rounds):
            for arm, script in (("as written", plain), ("rewritten", rewritten)):
                seconds, checksum = _run(script)
                times[arm].append(seconds)
                print(f"{arm:>10}: {seconds:6.2f} s, weights checksum {checksum}")
    for arm, values in times.items():
        print(f"{arm:>10}: median {statistics.median(values):.2f} s over {rounds} runs")


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", "3"))
    names = os.environ.get("PROGRAMS", ",".join(PROGRAMS)).split(",")
    unknown = [name for name in names if name not in PROGRAMS]
    if unknown:
        sys.exit(f"unknown PROGRAMS {unknown}: choose from {', '.join(PROGRAMS)}")
    for name in names:
        compare(name, rounds)


if __name__ == "__main__":
    main()
