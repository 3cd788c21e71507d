# python -m trainers.train --config=configs/mnist1d.py --workdir=/tmp/mnist1d
# Echo variants: --config=configs/mnist1d.py:echo=2,insert=before_augment[,buffer=1000]
# Seconds-long smoke run: --config=configs/mnist1d.py:smoke (also :smoke=1,
#   :echo=2,buffer=1000,smoke)
# Data parallel: --strategy=mirrored | multi_worker (TF_CONFIG, or --config.workers=H:P,H:P
#   --config.task_index=I in each worker) | tpu (--config.tpu=local); --config.jit_compile=True
"""MNIST-1D (40k train / 10k test, generated locally) with the 1-D CNN: the default experiment.

Arguments (after ``:``, comma-separated): ``echo`` (factor, 1 = none, or ``auto`` for an
``echoing.AutoEcho`` factor in [1, ``max_echo``], default 8), ``insert`` (``before_augment`` |
``after_augment`` | ``after_batch``), ``buffer`` (shuffle after echo), ``model``
(``mnist1d_cnn`` | ``mnist1d_mlp``), ``assist`` (AutoAssist filter after augmentation, with
``assist_reweight`` and ``assist_base_prob``), ``prune`` (loss-table pruning, InfoBatch, with
``prune_ratio``; the run ends after the epochs ``num_steps`` covers, in fewer steps),
``priority`` (priority sampling, with ``top_ratio`` and ``renew_ratio``; its old name ``pgd``
is read, with a FutureWarning, for one more release), ``smoke`` (tiny data, a few steps).

Examples: ``:assist=1,assist_reweight=1,assist_base_prob=0.3``, ``:prune=1,prune_ratio=0.5``,
``:priority=1,top_ratio=0.1``,
``:echo=auto,max_echo=8,insert=before_augment``.
"""

from trainers import config_args, experiment


def get_config(arg: str | None = None):
    args = config_args.parse(
        arg,
        {
            "echo": str,
            "max_echo": float,
            "insert": str,
            "buffer": int,
            "model": str,
            "assist": bool,
            "assist_reweight": bool,
            "assist_base_prob": float,
            "prune": bool,
            "prune_ratio": float,
            "priority": bool,
            "pgd": bool,  # priority's old name
            "top_ratio": float,
            "renew_ratio": float,
            "smoke": bool,
        },
    )
    args = config_args.rename(args, {"pgd": "priority"}, "configs/mnist1d.py")
    config = experiment.default_config()
    config.model = args.get("model", "mnist1d_cnn")
    config_args.set_echo(config, args)
    config.echo_insert = args.get("insert", "before_augment")
    config.echo_buffer_size = args.get("buffer", 0)
    config.assist = args.get("assist", False)
    config.assist_reweight = args.get("assist_reweight", False)
    config.assist_base_prob = args.get("assist_base_prob", 0.3)
    config.prune = args.get("prune", False)
    config.prune_ratio = args.get("prune_ratio", 0.5)
    config.priority = args.get("priority", False)
    config.priority_top_ratio = args.get("top_ratio", 0.1)
    config.priority_renew_ratio = args.get("renew_ratio", 0.9)
    if config.priority:  # it draws decoded examples by id: the augment stage would not run
        config.data.augment = "none"
    config.target_accuracy = 0.9
    if args.get("smoke", False):
        config.data.num_train, config.data.num_eval = 1_000, 200
        config.data.batch_size, config.data.eval_batch_size = 32, 200
        config.data.shuffle_buffer = 1_000
        # Seconds long: tf.data's autotuner would only add its teardown wait (data config autotune).
        config.data.autotune = False
        config.num_steps, config.warmup_steps = 20, 2
        config.steps_per_loop = config.eval_every_steps = config.checkpoint_every_steps = 10
        config.timing_steps = 3
        config.diagnose_steps = 20
        config.target_accuracy = 0.0
    return config
