"""One redaction rule for everything written or printed."""

import json
import time
import traceback
from pathlib import Path

import pytest

from data_pipeline import (
    ManifestError,
    Reading,
    SourceUnreachableError,
    TokenStreams,
    load_manifest,
    prepare,
    verify,
)
from data_pipeline.cli import main
from data_pipeline.redact import REDACTED, is_secret_name, redact, redact_text
from data_pipeline.shards.storage import Retry
from tests.cli.startups import start_ups, tiny
from tests.conftest import REPO_ROOT


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
        "X-Amz-Security-Token",
        "aws_session_token",
        "wandb_api_key",
        "aws_access_key_id",
        "private_token",
        "PRIVATE-TOKEN",
        "auth_key",
        "jwt",
        "user_jwt",
        "hmacKey",
        "session",
        "JSESSIONID",
        "ticket",
    ):
        assert is_secret_name(name), name
    for name in ("keep_last", "tgt_len", "path", "endpoint_url", "monkey"):
        assert not is_secret_name(name), name
    # whole words only: a word that merely starts like a credential's is an ordinary setting
    for name in ("n_token", "max_tokens", "tokenizer", "sort_key", "keyboard", "author"):
        assert not is_secret_name(name), name


def test_ordinary_config_values_survive_redaction_unchanged():
    settings = {
        "model": {"n_token": "abc", "tokenizer": "s3://bucket/tok.json", "sort_key": "length"},
        "eval": {"max_tokens": "all", "token_budget": "1e6"},
    }
    assert redact(settings) == settings
    for preset in (REPO_ROOT / "configs").glob("*.json"):
        values = json.loads(preset.read_text())
        assert redact(values) == values, preset.name


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


def test_more_credentials_in_urls_are_redacted_whole():
    for query in ("sig", "code", "pw", "X-Amz-Credential", "X-Amz-Security-Token", "apiKey"):
        url = f"https://acct.blob.core.windows.net/c/x?sv=2022&{query}=Zx9%2Bq&se=2030"
        assert redact_text(url) == url.replace("Zx9%2Bq", REDACTED), query
    for password in ("p@ss", "p'ss", "it's@home"):
        url = f"http://alice:{password}@host:8000/data"
        assert redact_text(f"cannot open {url}: gone") == (
            f"cannot open http://{REDACTED}@host:8000/data: gone"
        )


def test_parameters_after_a_fragment_or_percent_encoded_are_redacted():
    for url, shown in (
        ("https://app/cb#access_token=Zx9&state=s", f"https://app/cb#access_token={REDACTED}&state=s"),
        ("https://h/x?access%5Ftoken=Zx9&n=1", f"https://h/x?access%5Ftoken={REDACTED}&n=1"),
        ("https://h/x?%74oken=Zx9", f"https://h/x?%74oken={REDACTED}"),
        ("https://h/x;jsessionid=Zx9?page=2", f"https://h/x;jsessionid={REDACTED}?page=2"),
        ("https://h/x?private_token=Zx9#ticket=Ab1", f"https://h/x?private_token={REDACTED}#ticket={REDACTED}"),
    ):  # fmt: skip
        assert redact_text(f"cannot open {url} (gone)") == f"cannot open {shown} (gone)", url


@pytest.mark.parametrize("password", ["p/ss", "p?ss", "p#ss", "p ss", "p/s?s#s s@x"])
def test_a_password_that_ends_the_authority_early_is_redacted_whole(password):
    for url in (f"http://alice:{password}@host:8000/data", f"s3://AKIA:{password}@bucket/x"):
        scheme = url.split("://")[0]
        assert redact_text(f"cannot open {url}\nnext line a@b") == (
            f"cannot open {scheme}://{REDACTED}@{url.rsplit('@', 1)[1]}\nnext line a@b"
        )


def test_an_at_sign_after_a_host_is_no_password():
    for url in ("http://127.0.0.1:8000/users/@me", "hf://datasets/org/name@main/x.parquet"):
        assert redact_text(f"cannot open {url} (ask admin@example.com)").startswith(
            f"cannot open {url} "
        )


# Inputs that made the earlier patterns backtrack over the whole text at every position.
STALLING = {
    "letters": "a", "queries": "?", "ats": "@", "schemes": "a://x", "passwords": "a://u:p/",
}  # fmt: skip


@pytest.mark.parametrize("name", STALLING)
def test_redaction_takes_time_linear_in_the_text(name):
    def seconds(size: int) -> float:
        text = (STALLING[name] * size)[:size]
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            redact_text(text)
            best = min(best, time.perf_counter() - started)
        return best

    seconds(1_000)  # warm
    # 20 times the text: about 20 times the time when linear, 400 times when quadratic
    assert seconds(20_000) / seconds(1_000) < 80


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
        TokenStreams(missing, 2, 10, reading=Reading(storage_options=options))
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


@pytest.mark.parametrize(
    "secret_url",
    [
        "http://alice:p/ss-{secret}@{host}/wt103.zip",
        "http://alice:p?ss-{secret}@{host}/wt103.zip",
        "http://alice:p#ss-{secret}@{host}/wt103.zip",
        "http://alice:p ss-{secret}@{host}/wt103.zip",
        "http://{host}/wt103.zip?private_token={secret}&x=1",
        "http://{host}/wt103.zip?x=1#access_token={secret}",
        "http://{host}/wt103.zip?auth%5Fkey={secret}",
        "http://{host}/wt103.zip?jwt={secret}&hmac={secret}",
    ],
)
def test_txl_prepare_names_a_source_without_its_secret(tmp_path, refused_url, capsys, secret_url):
    host = refused_url.removeprefix("http://")
    source = secret_url.format(secret=PASSWORD, host=host)
    argv = ["--dataset", "wikitext-103", "--source", source, "--out", str(tmp_path / "out"),
            "--cache-dir", str(tmp_path / "cache"), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("txl-prepare: error: source http://") and error.count("\n") == 1
    assert PASSWORD not in error and REDACTED in error, error


# Credentials as services name them: no list of names catches them all, a pattern does.
SERVICE_PARAMETERS = (
    "subscription-key", "Ocp-Apim-Subscription-Key", "accesstoken", "authtoken", "apitoken",
    "secretkey", "clientsecret", "x-goog-credential", "dbpasswd", "SharedAccessSignature",
    "upload_sig", "oauthVerifier", "sessionToken", "userPwd",
)  # fmt: skip


def secret_query(base: str) -> str:
    """`base` with every service parameter holding its own secret, and a plain one."""
    pairs = [f"{name}={TOKEN}{i}" for i, name in enumerate(SERVICE_PARAMETERS)]
    return f"{base}?{'&'.join(pairs)}&part=7"


def test_parameters_naming_a_credential_anywhere_are_redacted():
    shown = redact_text(f"cannot open {secret_query('https://h/x')}: gone")
    assert TOKEN not in shown and shown.endswith("&part=7: gone")
    assert shown.count(REDACTED) == len(SERVICE_PARAMETERS)
    # in a config's keys too, where a word holds a credential's stem
    for name in ("clientsecret", "secretkey", "dbPasswd", "x_goog_credentials"):
        assert is_secret_name(name), name


@pytest.fixture
def back_to_back(monkeypatch):
    """A refused connection's retries, all of them, without the waits between them: the tests
    using it check what the last error shows (tests/data_pipeline/shards/test_storage.py checks
    the backoff)."""
    monkeypatch.setattr(Retry, "wait", lambda self, retry: 0.0)


def test_txl_prepare_verify_and_txl_export_vocab_hide_the_parameters(
    refused_url, capsys, back_to_back
):
    from txl_dist.cli.export import main as export_main

    url = secret_query(f"{refused_url}/data")
    assert main(["--verify", url]) == 2
    checkpoint = REPO_ROOT / "tests" / "fixtures" / "checkpoint_v1" / "global_step4"
    assert export_main([str(checkpoint), "never-written", "--vocab", url]) == 2
    for line in capsys.readouterr().err.splitlines():
        assert TOKEN not in line and REDACTED in line and "&part=7" in line, line


def test_txl_eval_hides_the_parameters(refused_url, capsys, tmp_path, back_to_back):
    from txl_dist.cli.evaluate import main as eval_main
    from txl_dist.model import TransformerXL, TXLConfig

    config = TXLConfig(n_token=12, n_layer=1, n_head=2, d_model=8, d_head=4, d_inner=8)
    TransformerXL(config).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("".join(f"w{i}\n" for i in range(12)))
    url = secret_query(f"{refused_url}/data")
    assert eval_main(["--model", str(tmp_path), "--data", url, "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert TOKEN not in error and REDACTED in error and "&part=7" in error, error


def pretrain_errors(tmp_path: Path, *cases: tuple[str, ...]) -> list[str]:
    """The stderr of launch/pretrain.py refusing the tiny config with each case's settings (the
    cases in one process start: tests/cli/startups.py)."""
    common = (f"train.out_dir={tmp_path / 'run'}", "data.test_split=null")
    ended = start_ups([(tiny(*settings, *common), {}) for settings in cases])
    for proc in ended:
        assert proc.returncode == 2 and proc.process_stderr == "", proc.stderr[-3000:]
    return [proc.stderr for proc in ended]


def test_pretrain_hides_a_data_path_and_an_init_from_credentials(tmp_path, refused_url, wt103):
    source = f"file://alice:{PASSWORD}@{tmp_path}/nothing?token={TOKEN}"
    data_error, error = pretrain_errors(
        tmp_path,
        # one try: the connection is refused at once, and a retry's waits add nothing here
        (f"data.path={secret_query(f'{refused_url}/data')}", "data.read_attempts=1"),
        (f"data.path={wt103}", f"train.init_from={source}"),
    )
    assert data_error.startswith("config error: ") and data_error.count("\n") == 1, data_error
    assert TOKEN not in data_error and REDACTED in data_error and "&part=7" in data_error
    assert "not a directory (No such file or directory)" in error  # its local part, with secrets
    assert error.count("\n") == 1 and not any(s in error for s in SECRETS), error
    assert f"train.init_from=file://{REDACTED}@{tmp_path}/nothing?token={REDACTED}: " in error
