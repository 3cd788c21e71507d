# python -m trainers.train --config=configs/data_service.py:address=localhost:5050 --workdir=/tmp/ds
# Without address: an in-process dispatcher + worker on localhost (address=local, the default).
# Seconds-long smoke run: --config=configs/data_service.py:smoke (also :address=HOST:PORT,smoke)
"""MNIST-1D whose read/decode/augment stages run on a tf.data service, echoed after it.

The upstream stages (read, decode, augment) run on the tf.data service workers behind the
dispatcher at ``address``; the echo stage and everything after it run in the trainer process,
after ``tf.data.experimental.service.distribute``. Start a dispatcher and workers with
``tf.data.experimental.service.DispatchServer`` / ``WorkerServer`` (see ``pipelines.service``).

Arguments (after ``:``, comma-separated): ``address`` (``grpc://host:port``, ``host:port`` or
``local``), ``echo`` (factor, default 2), ``insert`` (``before_augment`` | ``after_augment`` |
``after_batch``: where the service ends and echo starts, default ``after_augment``),
``mode`` (``parallel_epochs`` | ``distributed_epoch``), ``smoke`` (tiny data, a few steps).
"""

from trainers import config_args, experiment


def get_config(arg: str | None = None):
    args = config_args.parse(
        arg, {"address": str, "echo": float, "insert": str, "mode": str, "smoke": bool}
    )
    config = experiment.default_config()
    config.model = "mnist1d_cnn"
    config.data.service_address = args.get("address", "local")
    config.data.service_processing_mode = args.get("mode", "parallel_epochs")
    config.data.echo = args.get("echo", 2.0)
    config.data.echo_insert = args.get("insert", "after_augment")
    # The input position lives in the service's job, which a trainer checkpoint cannot save.
    config.checkpoint_iterator = False
    config.target_accuracy = 0.9
    if args.get("smoke", False):
        config.data.num_train, config.data.num_eval = 1_000, 200
        config.data.batch_size, config.data.eval_batch_size = 32, 200
        config.data.shuffle_buffer = 1_000
        config.num_steps, config.warmup_steps = 20, 2
        config.steps_per_loop = config.eval_every_steps = config.checkpoint_every_steps = 10
        config.timing_steps = 3
        config.diagnose_steps = 20
        config.target_accuracy = 0.0
    return config
