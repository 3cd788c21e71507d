"""Argument checks of ``trainers.loop.Trainer``: clear errors before anything is built.

Example::

    from trainers import loop_checks

    loop_checks.check_techniques([])  # () — nothing to refuse
"""

from __future__ import annotations

import keras
import tensorflow as tf

from echoing.techniques import Technique, replaces_gradients


def check_arguments(model, optimizer, train_dataset_fn, eval_dataset_fn, jit_compile) -> None:
    if not isinstance(model, keras.Model):
        raise TypeError(f"model must be a keras.Model, got {type(model).__name__}.")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"optimizer must be a keras.optimizers.Optimizer, got {type(optimizer).__name__}."
        )
    for name, fn in (("train_dataset_fn", train_dataset_fn), ("eval_dataset_fn", eval_dataset_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be callable (InputContext -> Dataset), got {fn!r}.")
    if train_dataset_fn is None:
        raise TypeError("train_dataset_fn is required (InputContext -> Dataset).")
    if not isinstance(jit_compile, bool):
        raise TypeError(f"jit_compile must be True or False, got {jit_compile!r}.")


def check_techniques(techniques) -> tuple[Technique, ...]:
    techniques = tuple(techniques)
    for technique in techniques:
        if not isinstance(technique, Technique):
            raise TypeError(
                "each entry of techniques must be an echoing.techniques.Technique (wrap a "
                "(ids, losses, step) callable in techniques.FeedbackCallback), got "
                f"{technique!r}."
            )
    hooks = [t.name for t in techniques if replaces_gradients(t)]
    if len(hooks) > 1:
        raise ValueError(
            f"techniques {hooks} each replace the backward pass; a run can use one of them."
        )
    return techniques


def check_placed(model, strategy) -> None:
    unplaced = [
        v.name
        for v in model.trainable_variables
        # Keras 3 variables wrap the tf.Variable the strategy created (or did not).
        if not strategy.extended.variable_created_in_scope(
            v.value if isinstance(v, keras.Variable) else v
        )
    ]
    if unplaced:
        raise ValueError(
            f"model variables {unplaced[:3]} were not created under "
            f"{type(strategy).__name__}.scope(); build the model and optimizer "
            "inside `with strategy.scope():`."
        )


def on_cpu(strategy, jit_compile: bool) -> bool:
    """Whether every replica runs on a CPU; refuses XLA over several CPU devices."""
    try:
        devices = [
            tf.DeviceSpec.from_string(d).device_type for d in strategy.extended.worker_devices
        ]
    except RuntimeError:
        # The default strategy has no device list: one replica, wherever TF places it.
        devices = ["default"]
    on_cpu = all(device == "CPU" for device in devices)
    if jit_compile and on_cpu and len(devices) > 1:
        raise ValueError(
            f"jit_compile=True under {type(strategy).__name__} over {len(devices)} CPU "
            "devices: XLA's CPU backend compiles for one device and cannot reach variables "
            "mirrored on the others. Use jit_compile=False, one CPU device, or GPUs/TPUs."
        )
    return on_cpu


def check_static_shapes(element_spec) -> None:
    """Refuses train batches whose shapes XLA would have to recompile for (or TPUs reject)."""
    dynamic = [
        f"{name} {spec.shape}"
        for name, spec in named_specs(element_spec, "batch")
        if isinstance(spec, tf.TensorSpec) and not spec.shape.is_fully_defined()
    ]
    if dynamic:
        raise ValueError(
            f"jit_compile=True needs train batches of static shape, got {', '.join(dynamic)}; "
            "batch with drop_remainder=True (after any filter), or use jit_compile=False."
        )


def named_specs(spec, name: str):
    if isinstance(spec, dict):
        for key, value in spec.items():
            yield from named_specs(value, f"{name}[{key!r}]")
    elif isinstance(spec, tf.TensorSpec):
        yield name, spec
    else:
        # Per-replica and other composite specs: their component specs, without names.
        for component in tf.nest.flatten(spec, expand_composites=True):
            yield from named_specs(component, name)
