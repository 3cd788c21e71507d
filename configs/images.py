# python -m trainers.train --config=configs/images.py --workdir=/tmp/images
# Echo variants: --config=configs/images.py:echo=2,insert=after_augment[,buffer=500]
# AutoAssist filter: --config=configs/images.py:assist=1[,assist_reweight=1]
# Seconds-long smoke run: --config=configs/images.py:smoke
# Data parallel: --strategy=mirrored | multi_worker (TF_CONFIG, or --config.workers=H:P,H:P
#   --config.task_index=I in each worker) | tpu (--config.tpu=local); --config.jit_compile=True
"""The small ResNet on generated 32×32 colour images (no download), with image augmentation.

Ten classes: five hues × two stripe orientations, at random stripe frequency, phase and
brightness, plus pixel noise. Random crop-resize, flips and colour jitter keep the class (hue
and orientation survive them), so the pipeline exercises the image augmentation stage the way a
TFDS image dataset would. Arguments: ``echo``, ``insert``, ``buffer``, ``assist``,
``assist_reweight``, ``smoke``.
"""

import numpy as np

from trainers import config_args, experiment

IMAGE_SIZE, NUM_CLASSES = 32, 10
_HUES = np.array(
    [[0.9, 0.2, 0.2], [0.2, 0.8, 0.2], [0.2, 0.3, 0.9], [0.9, 0.8, 0.1], [0.7, 0.2, 0.8]],
    np.float32,
)


def generate_images(num_examples: int, seed: int) -> dict:
    """``{"inputs": float32 [N, 32, 32, 3] in [0, 1], "label": int64 [N]}``, seeded."""
    random = np.random.default_rng(seed)
    labels = np.arange(num_examples, dtype=np.int64) % NUM_CLASSES
    random.shuffle(labels)
    frequency = random.uniform(0.3, 0.9, size=(num_examples, 1, 1))
    phase = random.uniform(0, 2 * np.pi, size=(num_examples, 1, 1))
    grid = np.arange(IMAGE_SIZE, dtype=np.float32)
    rows, columns = np.meshgrid(grid, grid, indexing="ij")
    # Classes 0-4 have horizontal stripes, 5-9 vertical ones; the hue is class % 5.
    position = np.where((labels >= 5)[:, None, None], columns[None], rows[None])
    stripes = 0.5 + 0.5 * np.sin(frequency * position + phase)
    brightness = random.uniform(0.6, 1.0, size=(num_examples, 1, 1, 1))
    images = stripes[..., None] * _HUES[labels % 5][:, None, None, :] * brightness
    images += random.normal(0.0, 0.05, size=images.shape)
    return {"inputs": np.clip(images, 0.0, 1.0).astype(np.float32), "label": labels}


def get_config(arg: str | None = None):
    args = config_args.parse(
        arg,
        {
            "echo": float,
            "insert": str,
            "buffer": int,
            "assist": bool,
            "assist_reweight": bool,
            "smoke": bool,
        },
    )
    smoke = args.get("smoke", False)
    num_train, num_eval = (256, 64) if smoke else (5_000, 1_000)
    config = experiment.default_config()
    config.model = "resnet_small"
    data = config.data
    data.source, data.augment = "arrays", "image"
    data.train_arrays = generate_images(num_train, seed=0)
    data.eval_arrays = generate_images(num_eval, seed=1)
    data.num_classes = NUM_CLASSES
    data.batch_size, data.eval_batch_size = 64, 500
    # Checkpoints hold the shuffle buffer (12 KiB per image): keep it small.
    data.shuffle_buffer = 1_000
    config.echo = args.get("echo", 1.0)
    config.echo_insert = args.get("insert", "after_augment")
    config.echo_buffer_size = args.get("buffer", 0)
    config.assist = args.get("assist", False)
    config.assist_reweight = args.get("assist_reweight", False)
    config.learning_rate, config.weight_decay = 2e-3, 1e-4
    config.num_steps, config.warmup_steps = 400, 50
    config.eval_every_steps = config.checkpoint_every_steps = 100
    config.target_accuracy = 0.9
    if smoke:
        data.batch_size, data.eval_batch_size = 16, 64
        data.shuffle_buffer = 256
        # Seconds long: tf.data's autotuner would only add its teardown wait (data config autotune).
        data.autotune = False
        config.num_steps, config.warmup_steps = 10, 2
        config.steps_per_loop = config.eval_every_steps = config.checkpoint_every_steps = 5
        config.timing_steps = 3
        config.target_accuracy = 0.0
    return config
