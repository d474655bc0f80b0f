"""The run's data as the engine reads it: this rank's training streams (one corpus, or the
corpora of data.mix by weight), an evaluation split's streams, and the training data's subword
tokenizer, which every checkpoint carries."""

from __future__ import annotations

import logging

from data_pipeline import (
    TOKENIZER_FILE,
    BatchStream,
    MixedStreams,
    MixSource,
    Reading,
    Subword,
    TokenStreams,
    VocabMismatchError,
    manifest_url,
    root_tokenizer,
)
from txl_dist.config.data import DataConfig
from txl_dist.config.sections import RunConfig
from txl_dist.process.dist import World

log = logging.getLogger(__name__)


def reading(data: DataConfig) -> Reading:
    """How the run's streams read its corpora: data.storage_options and data's retries."""
    return Reading(storage_options=data.storage_options, retry=data.retry())


def open_streams(
    config: RunConfig,
    world: World,
    split: str,
    tail: bool,
    rows: int,
    tgt_len: int | None = None,
    root: str | None = None,
) -> TokenStreams:
    """This rank's `rows` stream rows of `split` of the dataset at `root` (data.path if None;
    tail=True: evaluation, every token once)."""
    data = config.data
    return TokenStreams(
        manifest_url(root or data.path, split),
        rows_per_rank=rows,
        tgt_len=tgt_len or config.model.tgt_len,
        rank=world.rank,
        world_size=world.world_size,
        seed=config.train.seed,
        order=data.order,
        tail=tail,
        expected_vocab_size=config.model.n_token,
        reading=reading(data),
    )


def open_training_streams(config: RunConfig, world: World, rows: int) -> BatchStream:
    """This rank's training rows: of data.path, or of the corpora of data.mix by weight."""
    data = config.data
    if data.mix is None:
        return open_streams(config, world, data.train_split, tail=False, rows=rows)
    streams = MixedStreams(
        [MixSource(c.name, manifest_url(c.path, data.train_split), c.weight) for c in data.mix],
        rows_per_rank=rows,
        tgt_len=config.model.tgt_len,
        reading=reading(data),
        rank=world.rank,
        world_size=world.world_size,
        seed=config.train.seed,
        order=data.order,
        expected_vocab_size=config.model.n_token,
    )
    warning = streams.too_short(config.train.max_steps)
    if warning and world.is_main:
        log.warning(warning)
    return streams


def training_tokenizer(config: RunConfig, streams: BatchStream) -> Subword | None:
    """The training data's subword tokenizer, which every checkpoint carries (the first mixed
    corpus's: the corpora share it); None for a word or character vocabulary."""
    root = config.data.root
    tokenizer = root_tokenizer(root, config.data.storage_options)
    recorded = streams.manifest.vocab_sha256
    if tokenizer is not None and tokenizer.sha256 != recorded:
        raise VocabMismatchError(
            f"{root}/{TOKENIZER_FILE} has sha256 {tokenizer.sha256[:12]}, its manifests record "
            f"{recorded[:12]}: it changed after txl-prepare; prepare the data again"
        )
    return tokenizer
