"""A run's checkpoint parts: in the order a resume loads them, the RNG states (memory) after
anything that could draw from them, the tokenizer only for subword data."""

import torch

from data_pipeline import Subword
from tests.conftest import REPO_ROOT
from txl_dist.config.loading import load_run_config
from txl_dist.engine.checkpoint.parts import RunState, SeenTokens
from txl_dist.engine.checkpoint.parts.registry import checkpoint_parts
from txl_dist.engine.memory import MemoryBank
from txl_dist.process.dist import World

WORDS = ["the cat sat on the mat", "a dog sat on a log"] * 20


def parts_of(tokenizer: Subword | None):
    config = load_run_config(str(REPO_ROOT / "configs/tiny.json"), ["model.n_token=12000"])
    world, plan = World(1, 2, 1), config.plan(2)
    state, seen = RunState(run_id="r"), SeenTokens()
    device, memory = torch.device("cpu"), MemoryBank(plan.accumulation)
    # Registering reads neither the engine nor the streams: the parts hold them for a save.
    return checkpoint_parts(config, world, plan, device, None, None, memory, state, seen, tokenizer)


def test_word_data_checkpoints_its_parts_in_loading_order_without_a_tokenizer():
    parts = parts_of(None)
    assert [p.name for p in parts] == ["deepspeed", "run", "stream", "memory", "threads", "tokens"]
    tokens = parts[-1]
    assert (tokens.rank, tokens.world_size, tokens.per_step) == (1, 2, 4 * 64)


def test_subword_data_checkpoints_its_tokenizer_before_the_token_counts():
    subword = Subword.train_bpe(300, iter(WORDS))
    names = [p.name for p in parts_of(subword)]
    assert names == ["deepspeed", "run", "stream", "memory", "threads", "tokenizer.json", "tokens"]
