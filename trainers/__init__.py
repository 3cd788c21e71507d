"""trainers: one custom training loop, the models it trains, checkpoints, metrics, binaries.

Example::

    import tensorflow as tf
    import trainers

    with tf.distribute.get_strategy().scope():
        model = trainers.models.build_model("mnist1d_cnn", (40, 1), 10)

Run an experiment from a config with the binary::

    python -m trainers.train --config=configs/mnist1d.py --workdir=/tmp/mnist1d

Data parallel: ``--strategy=mirrored|multi_worker|tpu`` (``trainers.strategies``), or
``--strategy=parameter_server --config=configs/passm.py`` for the asynchronous trainer.

``model.fit`` users get ``trainers.EchoStatsCallback`` to log fresh examples and echo stats.
"""

from trainers import callbacks, loop, models, strategies
from trainers.callbacks import EchoStatsCallback
from trainers.loop import Trainer

__all__ = ["EchoStatsCallback", "Trainer", "callbacks", "loop", "models", "strategies"]
