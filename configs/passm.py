r"""Asynchronous partitioned SGD (PASSM+) on MNIST-1D with the 1-D CNN; ResNet variant.

    python -m trainers.train --config=configs/passm.py --workdir=/tmp/passm
    python -m trainers.train --config=configs/passm.py:smoke --workdir=/tmp/smoke
    python -m trainers.train --config=configs/passm.py:resnet --workdir=/tmp/resnet

The training binary runs a config with ``trainer = "passm"`` on the asynchronous trainer
(``trainers.passm.experiment``). On one host (no ``passm.cluster_spec``) that is the
shared-memory backend: ``passm.num_workers`` worker threads in one process over one model, each
with its own share of the input stream and its own momentum, PASSM writing only its block
lock-free, ASSM the whole model under a lock (``trainers.passm``). ``--config.passm.cluster_spec``
(or ``--strategy=parameter_server`` / ``--config.passm.backend=parameter_server`` for a loopback
cluster) runs the parameter-server backend; ``--strategy=default`` or ``mirrored`` trains
synchronously and logs why.

Variants (``:arg``): ``""`` MNIST-1D CNN, PASSM+ with 2 workers; ``resnet``: the small ResNet on
generated 32×32 images; ``smoke``: a few steps of the MLP (seconds); ``resnet_smoke``. Override
anything from the command line, e.g. ``--config.passm.mode=passm --config.passm.num_workers=4``
or ``--config.strategy=default`` (synchronous fallback) or
``--config.passm.cluster_spec='{"worker": [...], "ps": [...], "chief": [...]}'`` to join a
running cluster instead of training on this host.
The fields are the run config's (``trainers.run_config``, ``trainer = "passm"``) with the
asynchronous trainer's own in ``config.passm`` (``trainers.passm.config``).
The result (``WORKDIR/result.json``, printed at the end) reports ``staleness_mean`` and
``staleness_max``: how many other updates landed between a step's read and its write.
"""

from trainers import run_config
from trainers.passm import config as passm_config

VARIANTS = ("", "resnet", "smoke", "resnet_smoke")


def get_config(arg: str = ""):
    if arg not in VARIANTS:
        raise ValueError(f"configs/passm.py variant must be one of {VARIANTS}, got {arg!r}.")
    config = run_config.default_config()
    config.trainer = "passm"
    # Asynchronous; "default" / "mirrored": synchronous fallback.
    config.strategy = "parameter_server"
    config.model = "mnist1d_cnn"
    config.data.num_train, config.data.num_eval, config.data.batch_size = 4000, 1000, 32
    config.num_steps, config.learning_rate, config.eval_every_steps = 2000, 0.02, 250
    config.warmup_steps = 0  # its schedule is passm's: steps decays, no warm-up
    if arg.startswith("resnet"):
        config.passm.dataset, config.model = "generated_images", "resnet_small"
        config.data.num_train, config.data.num_eval = 2000, 500
        config.num_steps, config.eval_every_steps = 600, 100
    if arg.endswith("smoke"):
        if arg == "smoke":
            config.model = "mnist1d_mlp"
        config.data.num_train, config.data.num_eval, config.data.batch_size = 200, 100, 16
        config.num_steps, config.eval_every_steps = 16, 8
        config.passm.steps_per_call = 2  # so that both workers take steps of each short phase
    # The flat keys of the schema before (--config.mode=...), read with a warning for a release.
    passm_config.add_legacy_placeholders(config)
    return config
