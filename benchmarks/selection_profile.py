"""Where the Assistant methods' extra time per Boss step goes (a profile for selection.py).

Run (about 2 minutes)::

    python benchmarks/selection_profile.py   # writes benchmarks/results/selection_profile.json

Per kept batch of 128, medians of 200: the filtered pipeline alone, a Boss step alone on a cached
batch, the learner alone (feedback then wait until idle), and all of it together as
``selection.py`` runs it (seed 0, MNIST-1D 40k, the 1-D CNN, learning rate 0.05).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import selection as sel
from selection_assist import AssistMethod

data = sel.load_mnist1d(50_000, Path.home() / ".cache" / "echoing")
n = len(data["y"])
out = {}
for method in ("full", "assist", "assist_boss", "assist_oracle"):
    run = sel.Run(data, 0, 0.05, None, None)
    source = (
        tf.data.Dataset.from_tensor_slices(
            {"inputs": data["x"], "label": data["y"], "id": np.arange(n, dtype=np.int64)}
        )
        .shuffle(n, seed=0)
        .repeat()
    )
    assist = None
    if method != "full":
        assist = AssistMethod(method, run.model, data, 0, 0.3)
        run.table = assist.table
        source = source.apply(assist.stage)
    ds = source.batch(128, drop_remainder=True).prefetch(2)
    it = iter(ds)
    # the pipeline alone: 200 kept batches
    next(it)
    t0 = time.perf_counter()
    for _ in range(200):
        next(it)
    pipe = (time.perf_counter() - t0) / 200
    # the Boss step alone on a cached batch
    batch = next(it)
    run.step(batch)
    t0 = time.perf_counter()
    for _ in range(200):
        losses = run.step(batch)
    float(losses[0])
    step = (time.perf_counter() - t0) / 200
    # the learner alone: 200 feedbacks, waiting until it is idle
    learn = None
    if assist is not None and assist.learner is not None:
        ids = batch["id"]
        assist.learner.feedback_ids(ids, losses)
        assist.learner.wait_until_idle()
        t0 = time.perf_counter()
        for s in range(200):
            assist.learner.feedback_ids(ids, losses, step=s)
            assist.learner.wait_until_idle()
        learn = (time.perf_counter() - t0) / 200
    # all together, as in the benchmark (200 steps)
    t0 = time.perf_counter()
    for s in range(200):
        b = next(it)
        step_losses = run.step(b)
        if assist is not None:
            assist.after_step(b, step_losses, s + 1)
    float(step_losses[0])
    together = (time.perf_counter() - t0) / 200
    if assist is not None:
        assist.close()
    out[method] = dict(
        pipeline_ms=1e3 * pipe,
        boss_step_ms=1e3 * step,
        learner_ms=None if learn is None else 1e3 * learn,
        together_ms=1e3 * together,
    )
    print(
        method,
        {k: (round(v, 2) if v is not None else None) for k, v in out[method].items()},
        flush=True,
    )
full = out["full"]["together_ms"]
headline = {f"{m}_overhead": out[m]["together_ms"] / full - 1 for m in out if m != "full"}
path = sel.RESULTS / "selection_profile.json"
path.write_text(json.dumps({"headline": headline, "milliseconds": out}, indent=1))
print(json.dumps(headline), "->", path)
