# python -m trainers.train --config=configs/text_lm.py --workdir=/tmp/text_lm
# Your own text: --config.data.train_files='/data/train*.txt' --config.data.eval_files=...
# Echo variants: --config=configs/text_lm.py:echo=2,insert=after_decode,buffer=1000
#   (or insert=after_batch, or echo=auto)
# Loss-table pruning: --config=configs/text_lm.py:prune=1[,prune_ratio=0.5]
# AutoAssist filter on each line's bag of words: --config=configs/text_lm.py:assist=1
# Seconds-long smoke run: --config=configs/text_lm.py:smoke
"""A small decoder-only Transformer language model on text, with perplexity.

The default text is the embedded corpus (``pipelines.sources.corpus``: the docstrings of
Python's standard library, about 11,000 train and 1,300 test paragraphs, one per line). Lines are
tokenized in the pipeline by tensorflow-text's WordPiece tokenizer (a vocabulary learned from
the train lines, stored under the data directory: vocab_size 4,000 asks for more than this
corpus gives, 2,717 tokens, which the run's first line says), cut into windows of at most 64
tokens, batched by similar length and padded. The run reports next-token accuracy and
perplexity (exp of the mean per-token eval loss).

Arguments: ``echo`` (a factor, or ``auto`` with ``max_echo``), ``insert`` (``after_read``:
the token-id windows as read, tokenized once when the text loads | ``after_decode``: the
decoded examples | ``after_batch``),
``buffer`` (shuffle after echo), ``prune``, ``prune_ratio``, ``assist`` (an Assistant filter
scoring each line's bag of words, ``echoing.BagOfWords``), ``smoke``.
"""

from trainers import config_args, experiment


def get_config(arg: str | None = None):
    args = config_args.parse(arg, {**config_args.TECHNIQUE_ARGUMENTS, "assist": bool})
    smoke = args.get("smoke", False)
    config = experiment.default_config()
    config.model = "transformer_lm_small"
    data = config.data
    data.source, data.augment = "text", "none"
    data.text_max_length, data.vocab_size = 64, 4_000
    data.batch_size, data.eval_batch_size = 32, 256
    # Every paragraph of the embedded corpus (it has fewer than this many).
    data.num_train, data.num_eval = 40_000, 10_000
    data.shuffle_buffer = 20_000
    config_args.set_techniques(config, args, insert="after_decode")
    config.assist = args.get("assist", False)
    config.learning_rate, config.weight_decay = 1e-3, 1e-2
    config.num_steps, config.warmup_steps = 2_000, 200
    config.eval_every_steps = config.checkpoint_every_steps = 250
    config.target_accuracy = 0.2  # next-token accuracy on the test paragraphs
    if smoke:
        data.num_train, data.num_eval, data.vocab_size = 400, 100, 300
        # Seconds long: tf.data's autotuner would only add its teardown wait (data config autotune).
        data.autotune = False
        config.num_steps, config.warmup_steps = 10, 2
        config.steps_per_loop = config.eval_every_steps = config.checkpoint_every_steps = 5
        # No R measurement: it traces the model again, the longest part of a smoke run.
        config.timing_steps = 0
        config.diagnose_steps = 10
        config.target_accuracy = 0.0
    return config
