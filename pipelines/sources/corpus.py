"""The embedded default text: the docstrings of Python's standard library, one paragraph a line.

Example::

    from pipelines.sources import corpus

    train_file, eval_file = corpus.make_files("/tmp/echoing", num_train=500, num_eval=100)
    # /tmp/echoing/text/stdlib-docstrings-v1-py3.11/{train-500,test-100}.txt, written once

Why this corpus: it is real English prose (technical, like much of what language models read),
it is on every machine that runs this package (it ships with Python itself, no download, under
the PSF licence), and it is big enough for a small language model to learn from (about 12,000
paragraphs, 1.5 MB on Python 3.11). Paragraphs are the blank-line-separated blocks of every
module, class and function docstring of the standard library's ``.py`` files (tests and IDLE
left out), with their lines joined; doctest blocks (``>>>``) and paragraphs under five words are
dropped. A paragraph goes to the test file when the CRC-32 of its text is below 10% of the
range, so the split is stable. The text differs a little between Python versions: the folder
name carries the version.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sys
import sysconfig
import tempfile
import zlib

VERSION = "v1"
_SKIPPED_DIRECTORIES = {"test", "tests", "idlelib", "site-packages", "dist-packages", "lib2to3"}
_EVAL_FRACTION = 0.1


def make_files(data_dir: str, *, num_train: int, num_eval: int) -> tuple[str, str]:
    """``(train_file, eval_file)``: the first ``num_train`` / ``num_eval`` paragraphs (or all
    there are, when fewer) of each split, written under ``data_dir`` if missing."""
    python = f"py{sys.version_info.major}.{sys.version_info.minor}"
    root = os.path.join(data_dir, "text", f"stdlib-docstrings-{VERSION}-{python}")
    files = (
        os.path.join(root, f"train-{num_train}.txt"),
        os.path.join(root, f"test-{num_eval}.txt"),
    )
    if all(os.path.exists(path) for path in files):
        return files
    os.makedirs(root, exist_ok=True)
    paragraphs = _stdlib_paragraphs()
    held_out = [zlib.crc32(p.encode()) % 1000 < _EVAL_FRACTION * 1000 for p in paragraphs]
    for path, keep, count in zip(files, (False, True), (num_train, num_eval), strict=True):
        chosen = [p for p, out in zip(paragraphs, held_out, strict=True) if out == keep][:count]
        _write_atomically(path, "".join(f"{p}\n" for p in chosen))
    return files


@functools.cache
def _stdlib_paragraphs() -> list[str]:
    """Parsing the standard library takes seconds: once per process, for every size."""
    return list(docstring_paragraphs(sysconfig.get_paths()["stdlib"]))


def docstring_paragraphs(stdlib: str):
    """Yields the paragraphs of the docstrings under ``stdlib``, in a fixed (sorted) order."""
    for directory, subdirectories, filenames in os.walk(stdlib):
        subdirectories[:] = sorted(
            d for d in subdirectories if d not in _SKIPPED_DIRECTORIES and not d.startswith(".")
        )
        for filename in sorted(filenames):
            if filename.endswith(".py"):
                yield from _file_paragraphs(os.path.join(directory, filename))


def _file_paragraphs(path: str):
    try:
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return  # a file this Python cannot parse (e.g. a deliberately broken test fixture)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        docstring = ast.get_docstring(node)
        for block in re.split(r"\n\s*\n", docstring or ""):
            lines = [line.strip() for line in block.splitlines()]
            if any(line.startswith(">>>") for line in lines):
                continue
            text = " ".join(line for line in lines if line)
            if len(text.split()) >= 5:
                yield text


def _write_atomically(path: str, text: str) -> None:
    handle, staging = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".staging-")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(staging, path)
