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

import importlib.util
import pathlib

from trainers import config_args


def _mnist1d_config(arg: str | None):
    """configs/mnist1d.py's config: this file is that experiment with a service in front."""
    path = pathlib.Path(__file__).with_name("mnist1d.py")
    spec = importlib.util.spec_from_file_location("mnist1d_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def get_config(arg: str | None = None):
    args = config_args.parse(
        arg, {"address": str, "echo": float, "insert": str, "mode": str, "smoke": bool}
    )
    config = _mnist1d_config("smoke" if args.get("smoke", False) else None)
    config.data.service_address = args.get("address", "local")
    config.data.service_processing_mode = args.get("mode", "parallel_epochs")
    config.echo = args.get("echo", 2.0)
    config.echo_insert = args.get("insert", "after_augment")
    # Shuffles an example's copies apart (echo feeding batch() alone puts them in one batch);
    # whole batches need none.
    if config.echo != 1 and config.echo_insert != "after_batch":
        config.echo_buffer_size = 1000
    # The input position lives in the service's job, which a trainer checkpoint cannot save.
    config.checkpoint_iterator = False
    return config
