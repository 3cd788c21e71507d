r"""Asynchronous partitioned SGD (PASSM+) on MNIST-1D with the 1-D CNN; ResNet variant.

    python -m trainers.train --config=configs/passm.py --workdir=/tmp/passm
    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/smoke
    python -m trainers.train --config=configs/passm.py:resnet --workdir=/tmp/resnet

The training binary runs a config with a ``mode`` on the asynchronous trainer
(``trainers.async_experiment``); ``--strategy=default`` or ``mirrored`` trains synchronously and
logs why.

Variants (``:arg``): ``""`` MNIST-1D CNN, PASSM+ with 2 workers; ``resnet``: the small ResNet on
generated 32×32 images; ``smoke``: a few steps of the MLP (seconds); ``resnet_smoke``. Override
anything from the command line, e.g. ``--config.mode=passm --config.num_workers=4`` or
``--config.strategy=default`` (synchronous fallback) or ``--config.cluster_spec='{"worker": [...],
"ps": [...], "chief": [...]}'`` to join a running cluster instead of starting one in-process.
"""

import ml_collections

VARIANTS = ("", "resnet", "smoke", "resnet_smoke")


def get_config(arg: str = "") -> ml_collections.ConfigDict:
    if arg not in VARIANTS:
        raise ValueError(f"configs/passm.py variant must be one of {VARIANTS}, got {arg!r}.")
    config = ml_collections.ConfigDict()
    config.strategy = "parameter_server"  # or "default" / "mirrored": synchronous fallback
    config.cluster_spec = ""  # JSON {worker, ps, chief}; empty starts a loopback cluster here
    config.mode = "passm_plus"  # sync | assm | passm | passm_plus
    config.num_workers = 2
    config.dataset = "mnist1d"
    config.model = "mnist1d_cnn"
    config.num_train = 4000
    config.num_eval = 1000
    config.data_seed = 0
    config.seed = 0
    config.batch_size = 32
    config.num_steps = 2000
    config.learning_rate = 0.02
    config.momentum = 0.9
    config.decay_fractions = (0.5, 0.75)
    config.decay_factor = 0.1
    config.assm_warmup_fraction = 0.25  # PASSM+: full-gradient steps before PASSM starts
    config.assm_window_fraction = 0.1  # PASSM+: full-gradient window around each LR decay
    config.eval_every = 250
    config.steps_per_closure = 10  # steps per scheduled closure (amortises dispatch)
    config.target_accuracy = ml_collections.config_dict.placeholder(float)
    if arg.startswith("resnet"):
        config.dataset = "generated_images"
        config.model = "resnet_small"
        config.num_train = 2000
        config.num_eval = 500
        config.num_steps = 600
        config.eval_every = 100
    if arg.endswith("smoke"):
        if arg == "smoke":
            config.model = "mnist1d_mlp"
        config.num_train = 200
        config.num_eval = 100
        config.batch_size = 16
        config.num_steps = 16
        config.eval_every = 8
    return config
