"""One redaction rule for everything written or printed."""

import pytest

from tests.test_config import preset
from txl_dist.config import ConfigError, apply_overrides, run_config_from_dict
from txl_dist.redact import REDACTED, is_secret_name, redact, redact_text


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


def test_config_public_dict_and_errors_never_show_secrets():
    values = preset("tiny")
    values["data"]["storage_options"] = {"key": "AKIA_SECRET_1", "secret": "SECRET_2"}
    values["data"]["path"] = "http://user:SECRET_3@127.0.0.1:1/wt103"
    public = str(run_config_from_dict(values).public_dict())
    assert not any(s in public for s in ("SECRET_1", "SECRET_2", "SECRET_3"))
    # A wrongly typed value is named, not echoed.
    bad = preset("tiny")
    bad["data"]["storage_options"] = '{"secret": "SECRET_4"'  # unparsable JSON from --set
    with pytest.raises(ConfigError) as err:
        run_config_from_dict(bad)
    assert "data.storage_options must be" in str(err.value) and "SECRET_4" not in str(err.value)
    # A --set with a wrong separator echoes only the key.
    with pytest.raises(ConfigError) as err:
        apply_overrides(preset("tiny"), ["data.storage_options.secret:SECRET_5"])
    assert "data.storage_options.secret" in str(err.value) and "SECRET_5" not in str(err.value)
