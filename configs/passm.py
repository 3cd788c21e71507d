r"""Asynchronous partitioned SGD (PASSM+) on MNIST-1D with the 1-D CNN; ResNet variant.

    python -m trainers.train --config=configs/passm.py --workdir=/tmp/passm
    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/smoke
    python -m trainers.train --config=configs/passm.py:resnet --workdir=/tmp/resnet

The training binary runs a config with a ``mode`` on the asynchronous trainer
(``trainers.passm.experiment``). On one host (no ``cluster_spec``) that is the shared-memory
backend: ``num_workers`` worker threads in one process over one model, each with its own share of
the input stream and its own momentum, PASSM writing only its block lock-free, ASSM the whole
model under a lock (``trainers.passm``). ``--config.cluster_spec`` (or
``--strategy=parameter_server`` / ``--config.backend=parameter_server`` for a loopback cluster)
runs the parameter-server backend; ``--strategy=default`` or ``mirrored`` trains synchronously
and logs why.

Variants (``:arg``): ``""`` MNIST-1D CNN, PASSM+ with 2 workers; ``resnet``: the small ResNet on
generated 32×32 images; ``smoke``: a few steps of the MLP (seconds); ``resnet_smoke``. Override
anything from the command line, e.g. ``--config.mode=passm --config.num_workers=4`` or
``--config.strategy=default`` (synchronous fallback) or ``--config.cluster_spec='{"worker": [...],
"ps": [...], "chief": [...]}'`` to join a running cluster instead of training on this host.
The result (``WORKDIR/result.json``, printed at the end) reports ``staleness_mean`` and
``staleness_max``: how many other updates landed between a step's read and its write.
"""

import ml_collections

VARIANTS = ("", "resnet", "smoke", "resnet_smoke")


def get_config(arg: str = "") -> ml_collections.ConfigDict:
    if arg not in VARIANTS:
        raise ValueError(f"configs/passm.py variant must be one of {VARIANTS}, got {arg!r}.")
    config = ml_collections.ConfigDict()
    # Asynchronous; "default" / "mirrored": synchronous fallback.
    config.strategy = "parameter_server"
    # auto: shared_memory (threads over one model, this host) unless cluster_spec names a
    # cluster, then parameter_server; or name either.
    config.backend = "auto"
    config.cluster_spec = ""  # JSON {worker, ps, chief}: train on that parameter-server cluster
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
    # Steps per scheduled closure (parameter server) or per compiled call of a worker thread
    # (shared memory): amortises dispatch; fewer balance the end of a phase better.
    config.steps_per_closure = 10
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
        config.steps_per_closure = 2  # so that both workers take steps of each short phase
    return config
