"""txl-prepare's command line against Settings: every option of a run is a field, by name."""

from __future__ import annotations

from dataclasses import fields

from data_pipeline.cli import parser, settings_of
from data_pipeline.prepare.settings import Settings

# Settings the command line sets in its own way (--out-option, --source-option, --no-progress)
# or not at all (piece_bytes: tests make small pieces).
NOT_OPTIONS = {"out_options", "source_options", "progress", "piece_bytes"}


def test_every_setting_is_an_option_of_its_name():
    options = {action.dest for action in parser()._actions}
    assert {f.name for f in fields(Settings)} - NOT_OPTIONS <= options


def test_options_not_given_keep_the_settings_defaults():
    args = parser().parse_args(["--dataset", "wikitext-2", "--out", "o", "--no-progress"])
    settings = settings_of(args, {}, {})
    defaults = Settings("wikitext-2", "o", workers=args.workers, progress=False)
    assert settings == defaults
