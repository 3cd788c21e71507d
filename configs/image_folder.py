# python -m trainers.train --config=configs/image_folder.py --workdir=/tmp/image_folder
# Your own images: --config.data.image_dir=/path/to/folder (root/<class>/*.jpg, or
#   root/train/<class>/*.jpg and root/test/<class>/*.jpg) [--config.data.image_size=224]
# Echo variants: --config=configs/image_folder.py:echo=2,insert=after_augment,buffer=1000 (or auto)
# Loss-table pruning: --config=configs/image_folder.py:prune=1[,prune_ratio=0.5]
# Seconds-long smoke run: --config=configs/image_folder.py:smoke
"""JPEG photographs in class folders, decoded and cropped as for ImageNet, with a small ResNet.

The default data is the embedded photo set (``pipelines.sources.photos``: 2,000 train and 500
test JPEGs of 400-500 px cut from scikit-image's sample photographs, ten classes, generated
locally once). Training decodes each JPEG with a random-resized crop (only the crop's blocks are
decoded) to 64x64 and flips it; evaluation takes the central crop. ``resnet_imagenet_tiny`` is
cheap enough that decoding is the bottleneck on a CPU, as it is for ResNet-50 on an accelerator.

Arguments: ``echo`` (a factor, or ``auto`` with ``max_echo``), ``insert`` (``after_decode`` |
``after_augment`` | ``after_batch``; echoing before decode would re-read every file and is
refused), ``buffer`` (shuffle after echo), ``prune``, ``prune_ratio``, ``smoke``.
"""

from trainers import config_args, experiment


def get_config(arg: str | None = None):
    args = config_args.parse(arg, config_args.TECHNIQUE_ARGUMENTS)
    smoke = args.get("smoke", False)
    config = experiment.default_config()
    config.model = "resnet_imagenet_tiny"
    data = config.data
    data.source, data.augment = "image_folder", "inception"
    data.num_train, data.num_eval = (64, 32) if smoke else (2_000, 500)
    data.image_size = 64
    data.batch_size, data.eval_batch_size = (16, 32) if smoke else (64, 250)
    # The read stage shuffles file paths: a buffer of the whole set costs a few KB.
    data.shuffle_buffer = data.num_train
    config_args.set_techniques(config, args, insert="after_augment")
    config.learning_rate, config.weight_decay = 3e-3, 1e-4
    config.num_steps, config.warmup_steps = 1_500, 100
    config.eval_every_steps = config.checkpoint_every_steps = 100
    config.target_accuracy = 0.9
    if smoke:
        config.num_steps, config.warmup_steps = 10, 2
        # Seconds long: tf.data's autotuner would only add its teardown wait (data config autotune).
        data.autotune = False
        config.steps_per_loop = config.eval_every_steps = config.checkpoint_every_steps = 5
        config.timing_steps = 0  # R is measured by the full run and benchmarks/workloads.py
        config.diagnose_steps = 10
        config.target_accuracy = 0.0
    return config
