"""A deep-Q-learning replay loop, plainly and as `repeated-keras-call` rewrites it.

Run: ``.venv/bin/python benchmarks/replay_loop.py`` (``ROUNDS=N``, default 3).

The program is the pattern of many reinforcement-learning notebooks: a toy environment in
NumPy, a replay memory, and per sampled transition two ``model.predict`` calls and a
``model.fit`` of that one sample. It is profiled once (``python -m tfdiag_magic profile``); the
finding's rewrite (``predict_on_batch``, ``train_on_batch``) is then run against the program
as written, in turns, each in a process of its own. It prints each run's wall time (the
process's, TensorFlow's import included) and a checksum of the final weights: the rewrite
must train the same weights.
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

PROGRAM = '''\
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

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def _run(script: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=ENV, check=True
    )
    checksum = next(line for line in done.stdout.splitlines() if line.startswith("checksum"))
    return time.perf_counter() - start, checksum.split()[1]


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", "3"))
    with tempfile.TemporaryDirectory() as folder:
        plain = Path(folder) / "replay.py"
        plain.write_text(PROGRAM)
        report = Path(folder) / "replay.json"
        subprocess.run(
            [sys.executable, "-m", "tfdiag_magic", "profile", "--json", str(report), str(plain)],
            capture_output=True,
            env=ENV,
            check=True,
        )
        finding = next(
            f for f in json.loads(report.read_text())["findings"]
            if f["code"] == "repeated-keras-call"
        )  # fmt: skip
        print(finding["title"])
        print(finding["diff"] if finding.get("diff") else "(no rewrite)")
        rewritten = Path(folder) / "replay_rewritten.py"
        rewritten.write_text(finding["rewrite"])
        times: dict[str, list[float]] = {"as written": [], "rewritten": []}
        for _ in range(rounds):
            for name, script in (("as written", plain), ("rewritten", rewritten)):
                seconds, checksum = _run(script)
                times[name].append(seconds)
                print(f"{name:>10}: {seconds:6.2f} s, weights checksum {checksum}")
    for name, values in times.items():
        print(f"{name:>10}: median {statistics.median(values):.2f} s over {rounds} runs")


if __name__ == "__main__":
    main()
