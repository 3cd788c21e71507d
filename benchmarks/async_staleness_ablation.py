r"""Where asynchronous accuracy goes: staleness without threads, threads, and PASSM+'s switches.

    python benchmarks/async_staleness_ablation.py          # results/async_staleness_ablation.json
    python benchmarks/async_staleness_ablation.py --quick  # seconds (tested)
    python benchmarks/async_staleness_ablation.py --variants=delayed,concurrent_assm
    python benchmarks/async_staleness_ablation.py --momentum=0 --rates=0.1,0.2,0.5  # low momentum
    python benchmarks/async_staleness_ablation.py --async-updates-factor=2  # c x the updates
    python benchmarks/async_staleness_ablation.py --variants=sequential,delayed,delayed_predicted \
        --rates=0.005,0.01,0.02,0.03,0.05,0.1 \
        --output=benchmarks/results/async_staleness_ablation_remedies.json  # remedies
    python benchmarks/async_staleness_ablation.py --weight-prediction=both \
        --variants=sequential,concurrent_assm,concurrent_passm,concurrent_passm_plus \
        --rates=0.02,0.03,0.05 \
        --output=benchmarks/results/async_staleness_ablation_prediction.json  # in the backend

The MNIST-1D CNN of ``configs/passm.py`` (``num_steps`` updates, batch 32, momentum 0.9, decays
×0.1 at 50% and 75%), c = 2, each variant at every rate of the grid on the seeds given. The
input of worker w is ``async_experiment.train_dataset_fn(...)(w)``, exactly the backend's.

- ``sequential``: one worker, one step at a time (synchronous SGD through the backend's steps).
- ``round_robin``: c workers' compiled ASSM steps (`trainers.passm.steps.WorkerSteps`) one after
  the other, each with its own momentum buffer; staleness 0.
- ``delayed``: no threads; every update is the gradient at the parameters of exactly one update
  earlier (a second copy of the model holds them), applied to the current ones, the workers'
  momentum sets and inputs taken in turn as in ``round_robin``: staleness exactly 1, the
  statistical cost of the staleness the concurrent runs measure (mean ≈ 1), nothing else.
- ``delayed_shared``: ``delayed`` with one momentum buffer for both workers.
- ``delayed_predicted``: ``delayed`` with weight prediction (SpecTrain, Chen et al. 2018): the
  gradient is taken not at the parameters read but one momentum step of the update that lands
  in between further, x_read − η·m·u (u that update's worker's buffer before it): what a worker
  knows at its read of the update the other is about to apply.
- ``concurrent_assm`` / ``concurrent_passm`` / ``concurrent_passm_plus``: the shared-memory
  backend (`trainers.passm.SharedMemoryTrainer`), c threads, as the study runs it.
- ``concurrent_passm_plus_reset``: the same, every momentum buffer zeroed at each phase switch
  (ASSM ↔ PASSM), which separates the switch from the method.

``--weight-prediction=on`` (or ``both``: off, then on) runs the concurrent variants, and
``sequential`` and ``round_robin`` (the same steps), with the backend's ``weight_prediction``
(a worker's gradient at its read less its own momentum's next step, on what it writes;
`trainers.passm.steps`); with staleness 0 that is Nesterov's momentum, the control for what
the look-ahead gains without staleness. The delayed variants run once, without
(``delayed_predicted`` is theirs). Runs with it are headlined as ``<variant>_predicted``,
against ``sequential`` without.

``--async-updates-factor`` k runs the concurrent variants for k × ``num_steps`` updates in all:
with k = c each worker makes as many updates as ``sequential`` does, and each PASSM block gets as
many (only its worker writes it), which is what c workers do in the wall time of one if the
device runs them side by side at the speed of one.

``--momentum`` sets every variant's momentum (default the config's 0.9): with a gradient one
update stale, heavy-ball momentum is stable only for an effective step η/(1 − m) below ~1/h, so
a low-momentum grid keeps η/(1 − m) (m = 0 at 10× the rates) rather than η. Two more remedies
apply to the sequential variants only (the backend has neither): ``--warmup-fraction`` raises the
rate linearly from 0 over that fraction of the run; ``--dc-lambda`` adds DC-ASGD's delay
compensation (Zheng et al. 2017) to the stale gradients, g + λ·g⊙g⊙(x_now − x_read).

The headline is each variant's mean final accuracy at its best rate minus ``sequential``'s, in
points (null for a variant not run; ``<variant>_predicted`` for the concurrent ones with
weight prediction).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
VARIANTS = (
    "sequential",
    "round_robin",
    "delayed",
    "delayed_shared",
    "delayed_predicted",
    "concurrent_assm",
    "concurrent_passm",
    "concurrent_passm_plus",
    "concurrent_passm_plus_reset",
)
# Headline labels: every variant, and each concurrent one with weight prediction.
PREDICTABLE = tuple(v for v in VARIANTS if not v.startswith("delayed"))
LABELS = VARIANTS + tuple(f"{v}_predicted" for v in PREDICTABLE)
FULL = {"num_steps": 1600, "rates": [0.02, 0.05], "seeds": [0, 1], "workers": 2}
QUICK = {"num_steps": 40, "rates": [0.05], "seeds": [0], "workers": 2}


def _config(setup: dict, seed: int):
    import importlib.util

    spec = importlib.util.spec_from_file_location("passm_config", f"{ROOT}/configs/passm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from trainers.passm.config import flat_view

    config = flat_view(module.get_config(""))  # the flat names it sets and reads
    config.update(seed=seed, num_steps=setup["num_steps"], num_workers=setup["workers"])
    if setup.get("momentum") is not None:
        config.momentum = setup["momentum"]
    return config


def _rate_at(config, rate: float, step: int, warmup_fraction: float = 0.0) -> float:
    decays = sum(step >= round(f * config.num_steps) for f in config.decay_fractions)
    warmup = min(1.0, (step + 1) / (warmup_fraction * config.num_steps)) if warmup_fraction else 1
    return rate * config.decay_factor**decays * warmup


def delayed_step(model, shadow, state, momentum_set: int, *, prediction=0.0, dc_lambda=0.0):
    """``step(iterator, rate)``: one update of ``model`` with the gradient at its parameters of
    one update ago, which ``shadow`` (a second copy of the model, shared by every worker's step)
    holds; then ``shadow`` takes the parameters this update started from. Build every worker's
    step before training: building one sets ``shadow`` to the model's weights.

    ``prediction`` p > 0: ``shadow`` takes those parameters less p·η·m·u instead, u this step's
    momentum buffer before its update (weight prediction: the next gradient is taken where the
    update in between will have moved them, as far as its momentum foretells). ``dc_lambda`` λ:
    the gradient g becomes g + λ·g⊙g⊙(x_now − x_read) (DC-ASGD)."""
    import tensorflow as tf

    from trainers.passm.phased import mean_loss

    shadow.set_weights(model.get_weights())
    previous = [v.value for v in shadow.trainable_variables]

    def step(iterator, rate):
        features, labels = next(iterator)
        with tf.GradientTape() as tape:
            loss = mean_loss(shadow, features, labels)
        gradients = tape.gradient(loss, previous)
        before = [tf.identity(p.read_value()) for p in state.parameters]
        if dc_lambda:
            gradients = [
                g + dc_lambda * g * g * (now - read)
                for g, now, read in zip(gradients, before, previous, strict=True)
            ]
        read_next = before
        if prediction:
            step_size = prediction * rate * state.momentum
            momenta = state.momentum_sets[momentum_set]
            read_next = [
                b - step_size * u.read_value() for b, u in zip(before, momenta, strict=True)
            ]
        with tf.control_dependencies([*gradients, *read_next]):
            written = state.apply(range(len(previous)), gradients, rate, momentum_set=momentum_set)
        with tf.control_dependencies(written):
            return [p.assign(b) for p, b in zip(previous, read_next, strict=True)]

    return tf.function(step)


def train_sequential(
    setup: dict, variant: str, rate: float, seed: int, predict: bool = False
) -> dict:
    """``sequential``, ``round_robin``, ``delayed(_shared, _predicted)``: one thread, one update
    at a time."""
    import keras
    import tensorflow as tf

    from trainers import models
    from trainers.passm import UpdateMeter
    from trainers.passm import blocks as block_partition
    from trainers.passm import experiment as async_experiment
    from trainers.passm.state import TrainingState
    from trainers.passm.steps import WorkerSteps

    config = _config(setup, seed)
    workers = 1 if variant == "sequential" else setup["workers"]
    data = async_experiment.data_config(config)
    shape = data.train_arrays.inputs.shape[1:]
    keras.utils.set_random_seed(seed)
    model = models.build_model(config.model, shape, data.num_classes)
    sizes = [int(v.shape.num_elements()) for v in model.trainable_variables]
    blocks = block_partition.partition_blocks(sizes, workers)
    sets = 1 if variant == "delayed_shared" else workers
    state = TrainingState(model, blocks, config.momentum, num_momentum_sets=sets)
    dataset_fn = async_experiment.train_dataset_fn(data, seed=seed, num_workers=workers)
    iterators = [iter(dataset_fn(tf.constant(w, tf.int64))) for w in range(workers)]
    if variant.startswith("delayed"):
        shadow = models.build_model(config.model, shape, data.num_classes)
        remedies = {
            "prediction": float(variant == "delayed_predicted"),
            "dc_lambda": setup.get("dc_lambda", 0.0),
        }
        functions = [
            delayed_step(model, shadow, state, w % sets, **remedies) for w in range(workers)
        ]
    else:
        meter, lock = UpdateMeter(workers), tf.CriticalSection()
        steps = [
            WorkerSteps(model, state, meter, worker=w, lock=lock, weight_prediction=predict)
            for w in range(workers)
        ]
        compiled, one = [s.function("assm") for s in steps], tf.constant(1)
        functions = [(lambda it, r, f=f: f(it, r, one)) for f in compiled]
    for step in range(config.num_steps):
        worker = step % workers
        scheduled = _rate_at(config, rate, step, setup.get("warmup_fraction", 0.0))
        functions[worker](iterators[worker], tf.constant(scheduled))
    accuracy = async_experiment.make_evaluate(data, seed=seed)(model)
    keras.backend.clear_session()
    return {"final_accuracy": accuracy, "staleness_mean": float(variant.startswith("delayed"))}


def train_concurrent(
    setup: dict, variant: str, rate: float, seed: int, predict: bool = False
) -> dict:
    """The shared-memory backend as ``benchmarks/async_shared_memory.py`` runs it (``predict``:
    with ``weight_prediction``)."""
    import keras
    import tensorflow as tf

    from trainers import models, passm
    from trainers.passm import experiment as async_experiment
    from trainers.passm import schedule as passm_schedule

    config = _config(setup, seed)
    mode = variant.removeprefix("concurrent_").removesuffix("_reset")
    data = async_experiment.data_config(config)

    def model_fn():
        keras.utils.set_random_seed(seed)
        return models.build_model(config.model, data.train_arrays.inputs.shape[1:], 10)

    trainer = passm.SharedMemoryTrainer(
        model_fn,
        num_workers=config.num_workers,
        momentum=config.momentum,
        steps_per_call=config.steps_per_closure,
        weight_prediction=predict,
    )
    if variant.endswith("_reset"):
        train_chunk, last = trainer._train_chunk, {"mode": None}

        def reset_at_switch(mode, num_steps, learning_rate):
            if last["mode"] not in (None, mode):
                for momenta in trainer.state.momentum_sets:
                    for momentum in momenta:
                        momentum.assign(tf.zeros_like(momentum))
            last["mode"] = mode
            train_chunk(mode, num_steps, learning_rate)

        trainer._train_chunk = reset_at_switch
    phases = passm_schedule.make_schedule(
        mode,
        num_steps=config.num_steps,
        num_workers=config.num_workers,
        learning_rate=rate,
        decay_fractions=tuple(config.decay_fractions),
        decay_factor=config.decay_factor,
        assm_warmup_fraction=config.assm_warmup_fraction,
        assm_window_fraction=config.assm_window_fraction,
    )
    result = trainer.run(
        async_experiment.train_dataset_fn(data, seed=seed, num_workers=config.num_workers),
        phases,
        eval_every=config.num_steps,
        evaluate=async_experiment.make_evaluate(data, seed=seed),
    )
    # Each worker's step of each mode is traced once, before training: a phase switch reuses it.
    traces = {
        mode: [w.function(mode).experimental_get_tracing_count() for w in trainer.workers]
        for mode in sorted({phase.mode for phase in phases})
    }
    keras.backend.clear_session()
    kept = ("final_accuracy", "staleness_mean", "staleness_max", "worker_updates")
    return {**{key: result[key] for key in kept}, "traces_per_worker": traces}


def run(setup: dict, variant: str, rate: float, seed: int, predict: bool = False) -> dict:
    began = time.perf_counter()
    concurrent = variant.startswith("concurrent")
    if concurrent and setup.get("async_updates_factor", 1) != 1:
        # The c workers' updates in all: each PASSM block gets 1/c of them (its worker's).
        setup = {**setup, "num_steps": round(setup["num_steps"] * setup["async_updates_factor"])}
    train = train_concurrent if concurrent else train_sequential
    result = train(setup, variant, rate, seed, predict)
    if variant in PREDICTABLE:
        result["weight_prediction"] = predict
    momentum = _config(setup, seed).momentum
    remedies = {key: setup[key] for key in ("warmup_fraction", "dc_lambda") if key in setup}
    return {"variant": variant, "momentum": momentum, **remedies, "rate": rate, "seed": seed,
            "updates": setup["num_steps"], **result,
            "seconds": time.perf_counter() - began}  # fmt: skip


def _label(run: dict) -> str:
    return run["variant"] + ("_predicted" if run.get("weight_prediction") else "")


def headline(runs: list[dict], rates: list[float]) -> dict[str, float | None]:
    def best(label: str) -> float | None:
        means = [
            statistics.mean(r["final_accuracy"] for r in group)
            for rate in rates
            if (group := [r for r in runs if (_label(r), r["rate"]) == (label, rate)])
        ]
        return max(means) if means else None

    reference = best("sequential")
    return {
        f"{variant}_gap_points_c2": (
            None if reference is None or best(variant) is None
            else 100 * (best(variant) - reference)
        )
        for variant in LABELS
        if variant != "sequential"
    } | {"sequential_accuracy": reference}  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", help=f"comma-separated subset of {VARIANTS}")
    parser.add_argument("--rates", help="comma-separated learning rates (default 0.02,0.05)")
    parser.add_argument("--seeds", help="comma-separated seeds (default 0,1)")
    parser.add_argument("--momentum", type=float, help="every variant's momentum (default 0.9)")
    parser.add_argument(
        "--warmup-fraction", type=float, help="linear rate warm-up, sequential variants only"
    )
    parser.add_argument(
        "--dc-lambda", type=float, help="DC-ASGD's λ on the delayed variants' stale gradients"
    )
    parser.add_argument(
        "--weight-prediction",
        choices=("off", "on", "both"),
        default="off",
        help="the concurrent variants with the backend's weight prediction (both: off, then on)",
    )
    parser.add_argument(
        "--async-updates-factor",
        type=float,
        help="the concurrent variants run this many times num_steps updates in all (default 1)",
    )
    parser.add_argument("--output", help="JSON path (default results/async_staleness_ablation)")
    return parser


def _setup(args, parser) -> tuple[dict, list[str]]:
    """The settings the flags give, and the variants to run (refusing what cannot go)."""
    setup = dict(QUICK if args.quick else FULL)
    if args.rates:
        setup["rates"] = [float(r) for r in args.rates.split(",")]
    if args.seeds:
        setup["seeds"] = [int(s) for s in args.seeds.split(",")]
    optional = ("momentum", "warmup_fraction", "dc_lambda", "async_updates_factor")
    setup.update({key: getattr(args, key) for key in optional if getattr(args, key) is not None})
    if args.weight_prediction != "off":
        setup["weight_prediction"] = args.weight_prediction
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")
    concurrent = [v for v in variants if v.startswith("concurrent")]
    if concurrent and ({"warmup_fraction", "dc_lambda"} & set(setup)):
        parser.error(
            f"--warmup-fraction and --dc-lambda apply to the sequential variants only (the "
            f"backend has neither); drop {concurrent} from --variants or run them separately."
        )
    return setup, variants


def _run_all(setup: dict, variants: list[str], predictions: list[bool]) -> list[dict]:
    runs = []
    for variant in variants:
        for predict in predictions if variant in PREDICTABLE else [False]:
            for rate in setup["rates"]:
                for seed in setup["seeds"]:
                    runs.append(run(setup, variant, rate, seed, predict))
                    print(
                        f"{_label(runs[-1])} lr {rate} seed {seed}: "
                        f"{runs[-1]['final_accuracy']:.4f} "
                        f"(staleness {runs[-1].get('staleness_mean', 0):.2f})",
                        flush=True,
                    )
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from absl import logging

    logging.set_verbosity(logging.WARNING)
    setup, variants = _setup(args, parser)
    predictions = {"off": [False], "on": [True], "both": [False, True]}[args.weight_prediction]
    runs = _run_all(setup, variants, predictions)
    stem = "async_staleness_ablation" + ("_quick" if args.quick else "")
    path = args.output or os.path.join(RESULTS, stem + ".json")
    result = harness.write_results(
        path,
        headline=headline(runs, setup["rates"]),
        command="python benchmarks/async_staleness_ablation.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        settings=setup,
        runs=runs,
    )
    print(json.dumps(result["headline"], indent=1), f"\nwrote {path}")


if __name__ == "__main__":
    main()
