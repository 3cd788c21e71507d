"""Generating a data set on a full disk (or an unwritable directory) is one clear error."""

import errno

import pytest

from pipelines.sources import files, mnist1d, photos


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_mnist1d_on_a_full_disk_names_the_directory_and_the_flag(tmp_path, monkeypatch):
    monkeypatch.setattr(mnist1d.Mnist1d, "download_and_prepare", _full_disk)
    with pytest.raises(ValueError) as raised:
        mnist1d.load(64, 16, str(tmp_path))
    message = str(raised.value)
    assert message.startswith(f"cannot store MNIST-1D in {tmp_path}")
    assert "(No space left on device)" in message and "--config.data.data_dir=DIR" in message


def test_the_photo_set_on_a_full_disk_names_the_directory_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(photos, "_write_split", _full_disk)
    with pytest.raises(ValueError, match=r"cannot store the photo set in .*No space left"):
        photos.make_folder(str(tmp_path), num_train=4, num_eval=2)
    assert list((tmp_path / "photos").iterdir()) == []  # the staging folder is removed


@pytest.mark.parametrize(
    "error, fix",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "; free some space there or choose"),
        (OSError(errno.ENOENT, "No such file or directory"), "; create it (or its parent) or"),
        (OSError(errno.EACCES, "Permission denied"), "; make it writable or choose another"),
    ],
)
def test_the_fix_follows_the_cause(error, fix):
    message = str(files.cannot_store("MNIST-1D", "/nope", error))
    assert fix in message and message.endswith(
        "--config.data.data_dir=DIR (it is generated once, then read)."
    )
