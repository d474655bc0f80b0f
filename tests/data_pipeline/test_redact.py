"""One redaction rule for everything written or printed."""

import traceback

import pytest

from data_pipeline import (
    ManifestError,
    SourceUnreachableError,
    TokenStreams,
    load_manifest,
    prepare,
    verify,
)
from data_pipeline.cli import main
from data_pipeline.redact import REDACTED, is_secret_name, redact, redact_text
from data_pipeline.storage import Retry


def test_secret_names_and_plain_names():
    for name in (
        "key",
        "secret",
        "aws_secret_access_key",
        "session_token",
        "password",
        "apiKey",
        "Authorization",
        "credentials",
        "X-Amz-Signature",
    ):
        assert is_secret_name(name), name
    for name in ("keep_last", "tgt_len", "path", "endpoint_url", "monkey"):
        assert not is_secret_name(name), name


def test_redact_keeps_numbers_and_plain_values():
    value = {
        "model": {"n_token": 267735, "cutoffs": [20000]},
        "data": {
            "path": "http://alice:pw123@host:8000/wt103?X-Amz-Signature=sig456&part=1",
            "storage_options": {
                "endpoint_url": "http://127.0.0.1:9000",
                "anon": False,
                "client_kwargs": {"region_name": "eu"},
            },
        },
        "deepspeed": {"api_token": "tok789", "stage": 2},
    }
    out = redact(value)
    assert out["model"] == value["model"]
    assert (
        out["data"]["path"]
        == f"http://{REDACTED}@host:8000/wt103?X-Amz-Signature={REDACTED}&part=1"
    )
    assert out["data"]["storage_options"] == {
        "endpoint_url": REDACTED,
        "anon": False,
        "client_kwargs": {"region_name": REDACTED},
    }
    assert out["deepspeed"] == {"api_token": REDACTED, "stage": 2}
    assert "pw123" in value["data"]["path"]  # a copy: the live config keeps its credentials


def test_redact_text_in_messages():
    message = "cannot open s3://AKIA:SECRET@bucket/x and https://u@h/p?token=abc#frag"
    assert redact_text(message) == (
        f"cannot open s3://{REDACTED}@bucket/x and https://{REDACTED}@h/p?token={REDACTED}#frag"
    )


PASSWORD, TOKEN = "pw-Kd93SECRET", "tok-Vb51SECRET"
SECRETS = (PASSWORD, TOKEN)


def with_password(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@")


def shown(err: pytest.ExceptionInfo) -> str:
    """The message and the whole traceback a user would see, causes included."""
    text = "".join(traceback.format_exception(err.value))
    assert not any(s in text for s in SECRETS)
    return str(err.value)


def test_errors_over_http_name_the_url_without_its_password(tmp_path, http_server, refused_url):
    served = tmp_path / "served"
    served.mkdir()
    base = with_password(http_server(served).url)
    options = {"headers": {"X-Api-Key": TOKEN}}
    missing = f"{base}/data/valid/manifest.json"
    masked = missing.replace(f"alice:{PASSWORD}", REDACTED)
    with pytest.raises(ManifestError) as err:
        TokenStreams(missing, 2, 10, storage_options=options)
    assert shown(err) == f"manifest {masked} not found; run txl-prepare to (re)create it"
    with pytest.raises(SourceUnreachableError) as err:
        verify(f"{base}/data", options)
    assert (
        f"vocabulary file {masked.replace('valid/manifest.json', 'vocab.txt')} not found"
        in shown(err)
    )
    with pytest.raises(SourceUnreachableError) as err:
        prepare("wikitext-103", str(tmp_path / "out"), f"{base}/wt103.zip", source_options=options,
                cache_dir=str(tmp_path / "cache"), progress=False)  # fmt: skip
    assert shown(err) == f"source {base.replace(f'alice:{PASSWORD}', REDACTED)}/wt103.zip not found"
    refused = f"{with_password(refused_url)}/data/valid/manifest.json"
    with pytest.raises(SourceUnreachableError) as err:
        load_manifest(refused, options, Retry(attempts=2, first_wait_s=0.01))
    assert shown(err).startswith(f"cannot read manifest http://{REDACTED}@127.0.0.1:")


def test_prepare_from_a_url_with_a_password_leaves_no_trace(
    shared_data, tmp_path, http_server, capsys, caplog
):
    served = tmp_path / "served"
    served.mkdir()
    with open(shared_data / "wikitext-103" / "wiki.valid.tokens", "rb") as f:
        (served / "wiki.valid.tokens").write_bytes(f.read(100_000))  # a cut last article: warns
    source = f"{with_password(http_server(served).url)}/wiki.valid.tokens"
    out = tmp_path / "out"
    argv = ["--dataset", "wikitext-103", "--source", source, "--out", str(out), "--workers", "1",
            "--no-progress", "--source-option", f'headers={{"X-Api-Key": "{TOKEN}"}}']  # fmt: skip
    assert main(argv) == 0
    assert main(["--verify", str(out)]) == 0
    logged = caplog.text + "".join(capsys.readouterr())
    assert f"http://{REDACTED}@127.0.0.1:" in logged and "dropped its last, cut article" in logged
    assert not any(s in logged for s in SECRETS)
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written and not any(s.encode() in p.read_bytes() for p in written for s in SECRETS)
    with pytest.raises(SystemExit):
        main(["--verify", str(out), "--out-option", f"secret:{TOKEN}"])  # no '=': not echoed
    refusal = capsys.readouterr().err
    assert "--out-option / --source-option: a storage option is not KEY=VALUE" in refusal
    assert TOKEN not in refusal
