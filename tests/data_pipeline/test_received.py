"""A received file is read only as a regular file of its own, never through a link, never
blocking on a FIFO, never past its cap."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from data_pipeline import Vocab
from data_pipeline.limits import METADATA_BYTES, TEXT_BYTES
from data_pipeline.received import ReceivedFileError, read_received, read_received_text, read_url


def test_a_regular_file_is_read_whole(tmp_path):
    (tmp_path / "config.json").write_text('{"n_token": 5}')
    assert read_received_text(str(tmp_path / "config.json"), METADATA_BYTES, "config") == (
        '{"n_token": 5}'
    )
    assert read_url(f"file://{tmp_path}/config.json", METADATA_BYTES, "config") == (
        b'{"n_token": 5}'
    )


@pytest.mark.parametrize("target", ["/dev/zero", "elsewhere.json"])
def test_a_link_is_refused_wherever_it_points(tmp_path, target):
    (tmp_path / "elsewhere.json").write_text("{}")
    os.symlink(target, tmp_path / "config.json")
    with pytest.raises(ReceivedFileError) as err:
        read_received(str(tmp_path / "config.json"), METADATA_BYTES, "model config")
    assert str(err.value) == (
        f"{tmp_path}/config.json is a link: a model config is read only as a regular file of its "
        "own; copy the file itself there (cp -L) if you trust what it points to"
    )


def without_blocking(fifo: Path, call: Callable[[], Any]) -> Any:
    """What call() returns or raises, run in a thread; a test failure if it blocks (in open()
    of `fifo`), after unblocking it."""
    outcome: dict[str, Any] = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as err:  # noqa: BLE001 - raised again below
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the blocked open() returns
        thread.join(10)
        pytest.fail(f"blocked in open() of the FIFO {fifo}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "txl.json")
    with pytest.raises(ReceivedFileError) as err:
        without_blocking(
            tmp_path / "txl.json",
            lambda: read_received(str(tmp_path / "txl.json"), METADATA_BYTES, "checkpoint record"),
        )
    assert str(err.value) == (
        f"{tmp_path}/txl.json is not a regular file (a FIFO, device or directory): not a "
        "checkpoint record; replace it with the file itself"
    )


@pytest.mark.parametrize("size", [(64 << 20) + 1, 5 << 30])
def test_a_sparse_file_over_the_cap_is_refused_before_a_byte_is_read(tmp_path, size):
    path = tmp_path / "data.json"
    with open(path, "wb") as f:
        f.truncate(size)
    with pytest.raises(ReceivedFileError, match="holds more than TXL_MAX_METADATA_BYTES=67108864"):
        read_received(str(path), METADATA_BYTES, "record")


def test_the_cap_is_set_by_its_variable(tmp_path, monkeypatch):
    (tmp_path / "data.json").write_text("x" * 100)
    monkeypatch.setenv("TXL_MAX_METADATA_BYTES", "99")
    with pytest.raises(ReceivedFileError, match="more than TXL_MAX_METADATA_BYTES=99 bytes"):
        read_received(str(tmp_path / "data.json"), METADATA_BYTES, "record")
    monkeypatch.setenv("TXL_MAX_METADATA_BYTES", "100")
    assert len(read_received(str(tmp_path / "data.json"), METADATA_BYTES, "record")) == 100


def test_a_given_device_is_read_only_up_to_the_cap(monkeypatch):
    # txl-eval --text names its file on the command line: a pipe is fine, an endless one is not.
    monkeypatch.setenv("TXL_MAX_TEXT_BYTES", str(3 << 20))
    with pytest.raises(ReceivedFileError, match="/dev/zero holds more than TXL_MAX_TEXT_BYTES"):
        read_received("/dev/zero", TEXT_BYTES, "text file", given=True)
    with pytest.raises(ReceivedFileError, match="/dev/zero is not a regular file"):
        read_received("/dev/zero", TEXT_BYTES, "text file")


def test_text_that_is_not_utf8_is_refused_in_one_line(tmp_path):
    (tmp_path / "latest").write_bytes(b"global_step\xff")
    with pytest.raises(ReceivedFileError, match="latest is not a tag file .not UTF-8 text"):
        read_received_text(str(tmp_path / "latest"), METADATA_BYTES, "tag file")


def test_a_link_named_on_the_command_line_is_followed(tmp_path):
    """txl-prepare --vocab/--tokenizer and txl-export --vocab name their file themselves (a
    Hugging Face cache's snapshot is a link into its blobs): the link is followed, the caps
    still hold; a vocab.txt found in a received directory is never followed."""
    Vocab(["<eos>", "a", "b"]).save(str(tmp_path / "blob"))
    os.symlink(tmp_path / "blob", tmp_path / "vocab.txt")
    assert Vocab.load(str(tmp_path / "vocab.txt"), given=True).tokens == ["<eos>", "a", "b"]
    with pytest.raises(ReceivedFileError, match="vocab.txt is a link"):
        Vocab.load(str(tmp_path / "vocab.txt"))
