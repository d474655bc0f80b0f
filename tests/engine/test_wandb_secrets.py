"""wandb gets no secrets (config, argv) and goes online in auto mode only with credentials."""

import sys
from pathlib import Path

import pytest

from txl_dist.config.sections import WandbConfig
from txl_dist.engine.metrics import Metrics, wandb_mode


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def write_netrc(home: Path, host: str) -> None:
    path = home / ".netrc"
    path.write_text(f"machine {host}\n  login user\n  password k{'0' * 39}\n")
    path.chmod(0o600)


def test_auto_is_offline_with_a_netrc_for_another_host(home):
    assert wandb_mode("auto") == "offline"
    write_netrc(home, "github.com")
    assert wandb_mode("auto") == "offline"


def test_auto_is_online_with_credentials_for_the_configured_host(home, monkeypatch):
    write_netrc(home, "api.wandb.ai")
    assert wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert wandb_mode("auto") == "offline"  # our own server: the public key does not count
    write_netrc(home, "wandb.example.org")
    assert wandb_mode("auto") == "online"
    monkeypatch.delenv("WANDB_BASE_URL")
    (home / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_mode("auto") == "online"
    assert wandb_mode("offline") == "offline"


def test_offline_run_files_hold_no_secret_from_config_or_argv(home, tmp_path, monkeypatch):
    secrets = ["SECRETARGV1", "SECRETCFG2", "SECRETURL3"]
    monkeypatch.setattr(
        sys, "argv", ["pretrain.py", "--set", f"data.storage_options.secret={secrets[0]}"]
    )
    config = {
        "data": {
            "path": f"http://u:{secrets[2]}@127.0.0.1:1/wt103",
            "storage_options": {"secret": secrets[1]},
        },
        "train": {"max_steps": 3},
    }
    metrics = Metrics(str(tmp_path / "run"), enabled=True, run={"run_id": "r1", "restart": 0})
    (tmp_path / "run").mkdir()
    metrics.start_wandb(WandbConfig(mode="offline"), str(tmp_path / "run"), config, "abc123")
    assert metrics.wandb is not None
    metrics.log({"step": 1, "loss": 2.0}, None)
    metrics.close()
    files = [p for p in (tmp_path / "run" / "wandb").rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files)  # the run file that `wandb sync` uploads
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret} in {path}"
    assert secrets[1] in str(config)  # the caller's config is left intact
