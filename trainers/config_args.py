"""Parses a config file's argument string, ``configs/NAME.py:key=value,key=value,flag``.

Example::

    from trainers import config_args

    args = config_args.parse("echo=2,insert=before_augment,smoke", {
        "echo": float, "insert": str, "smoke": bool,
    })
    assert args == {"echo": 2.0, "insert": "before_augment", "smoke": True}

A bare key means ``key=1`` (so ``:smoke`` equals ``:smoke=1``). Unknown keys and values that do
not convert raise a ``ValueError`` naming the valid keys, so a typo never runs the baseline.
"""

from __future__ import annotations

import warnings

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse(arg: str | None, allowed: dict[str, type]) -> dict[str, object]:
    """Returns ``{key: value}`` for ``arg`` converted by ``allowed`` (key -> bool/int/float/str).

    Args:
      arg: the text after ``:`` in ``--config=FILE:arg``; None or "" gives ``{}``.
      allowed: the keys this config accepts and the type each converts to.

    Raises:
      ValueError: an unknown or repeated key, or a value that does not convert.
      TypeError: ``arg`` is not a string.
    """
    if arg is None:
        return {}
    if not isinstance(arg, str):
        raise TypeError(f"config argument must be a string like 'echo=2,smoke', got {arg!r}.")
    values: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in arg.split(","))):
        key, has_value, text = item.partition("=")
        key, text = key.strip(), text.strip() if has_value else "1"
        if key not in allowed:
            raise ValueError(
                f"unknown config argument key {key!r} in {arg!r}; valid keys are "
                f"{sorted(allowed)} (e.g. configs/mnist1d.py:echo=2,insert=before_augment)."
            )
        if key in values:
            raise ValueError(f"config argument key {key!r} is given twice in {arg!r}.")
        values[key] = _convert(key, text, allowed[key])
    return values


def _convert(key: str, text: str, kind: type) -> object:
    if kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"config argument {key}={text!r} must be a boolean (1/0, true/false).")
    try:
        return kind(text)
    except ValueError as error:
        raise ValueError(
            f"config argument {key}={text!r} must be a {kind.__name__}, e.g. {key}=2."
        ) from error


def rename(args: dict[str, object], renamed: dict[str, str], config: str) -> dict[str, object]:
    """``args`` with each old key of ``renamed`` (old -> new) given under its new name, with a
    FutureWarning naming the new key; the old keys are read for one more release.

    Example::

        rename(parse("pgd=1", {"pgd": bool, "priority": bool}), {"pgd": "priority"},
               "configs/mnist1d.py")  # {"priority": True}, and a FutureWarning

    Raises:
      ValueError: an old key and its new one are both given.
    """
    given = {old: new for old, new in renamed.items() if old in args}
    if not given:
        return args
    for old, new in given.items():
        if new in args:
            raise ValueError(
                f"config arguments {old} and {new} are one setting ({old} is {new}'s old name); "
                f"give only {new}, e.g. {config}:{new}={_text(args[old])}."
            )
    warnings.warn(
        f"{config}'s argument "
        + ", ".join(f"{old}= is now {new}=" for old, new in given.items())
        + "; the old name is read for one more release.",
        FutureWarning,
        stacklevel=3,
    )
    return {given.get(key, key): value for key, value in args.items()}


def _text(value: object) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


# Config-file arguments whose field has another name: a --config.ARGUMENT flag is refused with
# the field's name (trainers.flag_errors).
FIELD_OF_ARGUMENT = {
    "max_echo": "auto_echo_max_factor",
    "buffer": "echo_buffer_size",
    "insert": "echo_insert",
    "top_ratio": "priority_top_ratio",
    "renew_ratio": "priority_renew_ratio",
    "address": "data.service_address",
    "mode": "data.service_processing_mode",
}

# The arguments of every workload config for the techniques that work on any workload.
TECHNIQUE_ARGUMENTS: dict[str, type] = {
    "echo": str,
    "max_echo": float,
    "insert": str,
    "buffer": int,
    "prune": bool,
    "prune_ratio": float,
    "smoke": bool,
}


def set_techniques(config, args: dict[str, object], *, insert: str) -> None:
    """Echo (``set_echo``) at ``insert`` unless ``args`` name a point, shuffle after echo
    (``buffer``) and loss-table pruning (``prune``, ``prune_ratio``) from ``args``.

    Example::

        set_techniques(config, parse("echo=2,prune=1", TECHNIQUE_ARGUMENTS), insert="after_decode")
    """
    set_echo(config, args)
    config.echo_insert = args.get("insert", insert)
    config.echo_buffer_size = args.get("buffer", 0)
    config.prune = args.get("prune", False)
    config.prune_ratio = args.get("prune_ratio", 0.5)


def set_echo(config, args: dict[str, object]) -> None:
    """Sets ``config``'s echo from ``echo`` (a factor, or "auto" with ``max_echo``) in ``args``.

    Example::

        set_echo(config, parse("echo=auto,max_echo=4", {"echo": str, "max_echo": float}))
        # config.auto_echo_max_factor == 4.0; config.echo stays 1

    Raises:
      ValueError: ``echo`` is neither a number nor "auto", or ``max_echo`` comes without auto
        or is below 1.
    """
    echo = str(args.get("echo", "1"))
    if echo == "auto":
        max_echo = args.get("max_echo", 8.0)
        if not max_echo >= 1:  # the field's 0 means AutoEcho off: echo=auto would not echo
            raise ValueError(
                f"config argument max_echo={max_echo!r} must be >= 1 with echo=auto (the "
                "largest factor AutoEcho may set, e.g. max_echo=8); leave echo=auto out for "
                "no echo."
            )
        config.auto_echo_max_factor = max_echo
        return
    if "max_echo" in args:
        raise ValueError(f"config argument max_echo needs echo=auto, got echo={echo!r}.")
    try:
        config.echo = float(echo)
    except ValueError as error:
        raise ValueError(
            f"config argument echo={echo!r} must be a float or 'auto', e.g. echo=2."
        ) from error
