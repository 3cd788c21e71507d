"""A mistake in the binary's command line as one line, instead of absl's or ml_collections'
traceback: ``--FLAG: what was wrong; how to fix``, which ``trainers.train.parse_flags`` prints as
``error: ...`` before it exits with status 2.

Example::

    from trainers import flag_errors

    flag_errors.missing_config_file(["train", "--config=configs/nope.py"])
    # "--config: no config file 'configs/nope.py'; the configs in configs/ are ..."
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence

from absl import app, flags

from trainers import config_args

# The repository's config files, listed when --config names a file that does not exist.
_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def missing_config_file(argv: Sequence[str], configs: str = _CONFIGS) -> str | None:
    """The one line for a ``--config`` in ``argv`` that names no file (a typo, or a path relative
    to another directory): the path given and the config files in ``configs``; None when the
    file exists or ``--config`` is not given. Checked before parsing, because ml_collections
    only fails when the config is first read, with a traceback."""
    given = _config_flag_value(argv)
    if given is None:
        return None
    path = given.split(":", 1)[0]
    if os.path.isfile(path):
        return None
    names = sorted(n for n in _listing(configs) if n.endswith(".py") and not n.startswith("_"))
    if not names:
        return f"--config: no config file {path!r}; give the path of a config file"
    shown = os.path.relpath(configs)
    shown = configs if shown.startswith("..") else shown
    example = "mnist1d.py" if "mnist1d.py" in names else names[0]
    return (
        f"--config: no config file {path!r}; the configs in {shown}{os.sep} are "
        f"{', '.join(names)}, e.g. --config={os.path.join(shown, example)}"
    )


def _config_flag_value(argv: Sequence[str]) -> str | None:
    """The last ``--config=VALUE`` or ``--config VALUE`` in ``argv`` (absl keeps the last)."""
    value = None
    for index, arg in enumerate(argv[1:], start=1):
        name, has_value, text = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or name != "config":
            continue
        if has_value:
            value = text
        elif index + 1 < len(argv):
            value = argv[index + 1]
    return value


def _listing(folder: str) -> list[str]:
    """The names in ``folder``; none when it cannot be read (an installed copy without it)."""
    try:
        return os.listdir(folder)
    except OSError:
        return []


def flag_mistake(error: Exception, argv: Sequence[str]) -> str | None:
    """The one line for ``error``, which absl or ml_collections raised while parsing the
    command line ``argv``: ``--FLAG: what was wrong; how to fix``. None when ``error`` is not
    about the command line (a bug, whose traceback should show)."""
    if isinstance(error, flags.UnrecognizedFlagError):
        return _unknown_flag(error)
    if isinstance(error, flags.IllegalFlagValueError):
        return _illegal_value(str(error))
    if isinstance(error, (AttributeError, KeyError)):
        return _missing_config_key(error, argv)
    if isinstance(error, flags.Error):
        early = re.match(r"Found (--config\.[^=\s]+)\S* in argv before a value", str(error))
        if early:
            return (
                f"{early.group(1)}: given before --config; put --config=FILE first, e.g. "
                f"python -m trainers.train --config=configs/mnist1d.py {early.group(1)}=..."
            )
        # absl's other flag errors (a flag given twice) name it.
        return " ".join(str(error).split())
    return None


def _unknown_flag(error: flags.UnrecognizedFlagError) -> str:
    """``--bogus: no such flag`` with absl's suggestion, or where the flags are listed."""
    suggestions = re.search(r"Did you mean: (.+) \?$", str(error))
    if suggestions is None:
        return f"--{error.flagname}: no such flag; python -m trainers.train --helpshort lists them"
    names = " or ".join(f"--{name}" for name in suggestions.group(1).split(", "))
    return f"--{error.flagname}: no such flag; did you mean {names}?"


def _illegal_value(text: str) -> str:
    """A value absl's parser or a flag validator refused, or a config argument the config
    file refused (``--config=configs/mnist1d.py:bogus=1``)."""
    if "Error whilst parsing config file" in text:
        # ml_collections wraps the config file's own error in its traceback: its last line.
        last = [line for line in text.splitlines() if line.strip()][-1]
        said = _config_file_type(last) or re.sub(r"^\w+(Error|Exception): ", "", last)
        return "--config: " + said
    # One mistake at a time: absl joins every failed validator's message with newlines.
    match = re.match(r"flag --([^=\s]+)=(.*?): (.*)", text.splitlines()[0])
    if match is None:
        return " ".join(text.split())
    name, value, reason = match.groups()
    return f"--{name}: {_wrong_kind(name, value) or reason}"


def _config_file_type(line: str) -> str | None:
    """ml_collections' "Could not override field 'x' (reference). 0.5 is of original type <class
    'str'> and cannot be casted to type <class 'float'>", for a config file that sets a field to
    a value of another type, as what it is; None for any other line."""
    match = re.search(
        r"Could not override field '([^']+)'.*?\. (.*) is of original type <class '(\w+)'> and "
        r"cannot be casted to type <class '(\w+)'>",
        line,
    )
    if match is None:
        return None
    field, value, given, expected = match.groups()
    example = {"float": "0.5", "int": "10", "bool": "True"}.get(expected, "...")
    return (
        f"the config file sets {field} to a {given} ({value!r}), but {field} is a {expected}; "
        f"set it to one, e.g. config.{field} = {example}"
    )


def _wrong_kind(name: str, value: str) -> str | None:
    """What a value that is not of its flag's kind (a bool, an int, a float) should be, with an
    example (the flag's default: for ``--config.*`` the config's value); None for a value of
    the right kind (out of its range: the parser's message says so)."""
    if name not in flags.FLAGS:
        return None
    flag = flags.FLAGS[name]
    parser = flag.parser
    if isinstance(parser, flags.BooleanParser):
        return f"{value!r} is not true or false; write --{name}=true or --{name}=false"
    kinds = ((flags.IntegerParser, "a whole number"), (flags.FloatParser, "a number"))
    for kind, words in kinds:
        if not isinstance(parser, kind):
            continue
        try:
            parser.convert(value)
        except (TypeError, ValueError):
            example = flag.default if isinstance(flag.default, (int, float)) else 1
            return f"{value!r} is not {words}; give one, e.g. --{name}={example}"
    return None


def _missing_config_key(error: Exception, argv: Sequence[str]) -> str | None:
    """A ``--config.KEY`` whose key the config does not have, with ml_collections' suggestion;
    None for an AttributeError or KeyError that names no key (not the command line's)."""
    text = str(error).encode().decode("unicode_escape")
    key = re.search(r"'([^']+)'", text)
    if key is None:
        return None
    given = [arg.split("=")[0] for arg in argv if arg.startswith("--config.")]
    flag = next((arg for arg in given if arg.endswith(f".{key.group(1)}")), "--config.?")
    suggestion = re.search(r'Did you mean "([^"]+)"', text)
    hint = ""
    if suggestion:
        hint = f"; did you mean {flag[: -len(key.group(1))]}{suggestion.group(1)}?"
    field = config_args.FIELD_OF_ARGUMENT.get(key.group(1))
    if field and flag == f"--config.{key.group(1)}":  # a config file's argument, as a flag
        hint = (
            f"; {key.group(1)} is a config-file argument (--config=FILE:{key.group(1)}=...), "
            f"whose field is --config.{field}"
        )
    return f"{flag}: the config has no key {key.group(1)!r}{hint}"


def as_data_flags(message: str, keys: Sequence[str]) -> str:
    """``message`` (a data-config error of ``pipelines``, which names fields as a Python user
    sets them: ``data config image_size``, ``e.g. image_size=224``) with the fields named as the
    binary's flags: ``--config.data.image_size``, ``e.g. --config.data.image_size=224``. A
    message that names no data config is returned as it is.

    Example::

        as_data_flags("data config source='tfds' needs name, e.g. name='mnist'", ["name", "source"])
        # "--config.data.source='tfds' needs name, e.g. --config.data.name='mnist'"
    """
    if "data config" not in message:
        return message
    names = "|".join(sorted(map(re.escape, keys), key=len, reverse=True))
    message = re.sub(rf"\bdata config ({names})\b", r"--config.data.\1", message)
    return re.sub(rf"(?<![.\w-])({names})(?==)", r"--config.data.\1", message)


def echo_insert_without_echo(config, argv: Sequence[str], overrides: dict) -> str | None:
    """The one line for an echo insertion point given while echo is off, which places no stage
    (the run would train without echo): ``--config.echo_insert`` (in ``overrides``, the
    command line's ``--config.*`` values) or the config argument ``insert=`` (in ``argv``'s
    ``--config=FILE:ARGS``). Checked once both are applied: ``:insert=after_batch
    --config.echo=2`` is echo. None otherwise (a config's own default point is no mistake)."""
    if config.echo != 1 or config.auto_echo_max_factor:
        return None
    if "echo_insert" in overrides:
        given = f"--config.echo_insert={overrides['echo_insert']}"
    else:
        argument = re.search(r"[:,]insert=([^,]*)", _config_flag_value(argv) or "")
        if argument is None:
            return None
        given = f"--config=...:insert={argument.group(1)}"
    return (
        f"{given} places the echo stage, and echo is off (echo=1); set a factor, e.g. "
        "--config=configs/mnist1d.py:echo=2,insert=... or --config.echo=2 (or echo=auto for "
        "AutoEcho), or drop the insertion point."
    )


# Config arguments named otherwise than the config field they set (configs/mnist1d.py).
_ARGUMENT_OF_FIELD = {"priority_top_ratio": "top_ratio", "priority_renew_ratio": "renew_ratio"}


def options_without_technique(config, argv: Sequence[str], overrides: dict) -> str | None:
    """The one line for a technique's option given while the technique is off: the field as a
    flag (``--config.priority_top_ratio=0.1``, in ``overrides``) or as a config argument
    (``:top_ratio=0.1`` in ``argv``'s ``--config=FILE:ARGS``), even at its default value, which
    the config check (``config_checks.refuse_options_when_off``) cannot tell from no option.
    Checked once both are applied. None otherwise."""
    # Here, not at the top: importing echoing imports TensorFlow, whose start-up lines would
    # come before this module's one-line errors for the flags parsed earlier.
    from echoing._src.core import config_checks

    _, _, arguments = (_config_flag_value(argv) or "").partition(":")
    given_arguments = dict(
        part.strip().partition("=")[::2] for part in arguments.split(",") if part.strip()
    )
    for switch, (defaults, example) in config_checks.OPTIONS_WHEN_OFF.items():
        if config[switch]:
            continue
        given = []
        for field in defaults:
            argument = _ARGUMENT_OF_FIELD.get(field, field)
            if field in overrides:
                given.append(f"--config.{field}={overrides[field]}")
            elif argument in given_arguments:
                given.append(f"--config=...:{argument}={given_arguments[argument] or 1}")
        if given:
            return config_checks.options_when_off_message(given, switch, example)
    return None


def unread_data_flags(data, overrides: dict) -> str | None:
    """The one line for ``--config.data.*`` overrides of fields that the data config ``data``
    does not read (``--config.data.name=cifar10`` on MNIST-1D, which is generated;
    ``--config.data.num_train`` with an ``image_dir``, whose images are all used): the run would
    train without them. None when it reads them all."""
    from pipelines import source_fields

    given = [key.removeprefix("data.") for key in overrides if key.startswith("data.")]
    unread = source_fields.unread_fields(data, given)
    if not unread:
        return None
    flags = ", ".join(f"--config.data.{key}" for key in unread)
    reads = ", ".join(sorted(source_fields.fields_read(data)))
    return (
        f"{flags}: the data source {data.source!r} "
        f"{_selected_by(data)}does not read {'this field' if len(unread) == 1 else 'these fields'}"
        f", so the run would train without {'it' if len(unread) == 1 else 'them'}; it reads "
        f"{reads}. Drop the flag, or set --config.data.source to the source that reads it "
        "(tfds, tfrecord, image_folder, text, arrays, mnist1d)."
    )


def _selected_by(data) -> str:
    """What makes a source skip fields it reads otherwise, as the clause after its name."""
    if data.source == "image_folder" and data.image_dir:
        return f"at --config.data.image_dir={data.image_dir} (every image there is used) "
    if data.source == "text" and data.name:
        return f"reading the TFDS dataset --config.data.name={data.name} "
    if data.source == "text" and data.train_files:
        return "reading --config.data.train_files and eval_files "
    return ""


def not_for_passm(*, diagnose: bool, eval_only: bool) -> str | None:
    """Why ``--diagnose`` or ``--eval_only`` cannot go with a PASSM config (trainer='passm'),
    and what to do instead; None when neither is given."""
    if diagnose:
        return (
            "--diagnose times the synchronous loop's input pipeline; this config "
            "(trainer='passm') belongs to the asynchronous trainer. Diagnose the same data "
            "with a synchronous config, e.g. --config=configs/mnist1d.py --diagnose."
        )
    if eval_only:
        return (
            "--eval_only reads the synchronous loop's checkpoints; this config "
            "(trainer='passm') belongs to the asynchronous trainer, whose checkpoints hold "
            "other state. To evaluate its workdir, rerun the same command without "
            "--eval_only (a finished run trains nothing and reports its restored model's "
            "accuracy), or load WORKDIR/model.keras with keras.models.load_model."
        )
    return None


def parse_serve(task: str, cluster_spec: str | None) -> tuple[dict, str, int]:
    """``--serve=JOB:INDEX`` and ``--cluster_spec`` as ``(spec, job, index)``; a mistake is an
    ``absl.app.UsageError`` naming both flags and an example."""
    job, _, index = task.partition(":")
    if not index.isdigit() or not cluster_spec:
        raise app.UsageError(
            f"--serve takes JOB:INDEX with --cluster_spec, e.g. --serve=ps:0 "
            f'--cluster_spec=\'{{"worker": [...], "ps": [...]}}\'; got --serve={task!r} and '
            f"--cluster_spec={cluster_spec!r}."
        )
    try:
        spec = json.loads(cluster_spec)
    except json.JSONDecodeError as error:
        raise app.UsageError(
            f"--cluster_spec is not JSON ({error}); it maps each job to its host:port list, "
            f'e.g. --cluster_spec=\'{{"worker": ["localhost:2223"], "ps": ["localhost:2222"]}}\'.'
        ) from None
    return spec, job, int(index)
