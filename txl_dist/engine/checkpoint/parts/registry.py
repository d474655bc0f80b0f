"""The parts every checkpoint of a run holds, in the order a resume loads them."""

from __future__ import annotations

import torch

from data_pipeline import BatchStream, Subword
from txl_dist.config.plan import RunPlan
from txl_dist.config.sections import RunConfig
from txl_dist.engine.checkpoint.parts.deepspeed import DeepSpeedPart
from txl_dist.engine.checkpoint.parts.memory import MemoryPart
from txl_dist.engine.checkpoint.parts.part import CheckpointPart
from txl_dist.engine.checkpoint.parts.run import RunPart, RunState
from txl_dist.engine.checkpoint.parts.stream import StreamPart
from txl_dist.engine.checkpoint.parts.threads import ThreadsPart
from txl_dist.engine.checkpoint.parts.tokenizer import TokenizerPart
from txl_dist.engine.checkpoint.parts.tokens import SeenTokens, TokensPart
from txl_dist.engine.memory import MemoryBank
from txl_dist.process.dist import World


def checkpoint_parts(
    config: RunConfig,
    world: World,
    plan: RunPlan,
    device: torch.device,
    engine,
    streams: BatchStream,
    memory: MemoryBank,
    state: RunState,
    seen: SeenTokens,
    tokenizer: Subword | None,
) -> list[CheckpointPart]:
    """What every checkpoint of the run holds, in the order a resume loads them (the RNG
    states, with the memories, after anything that could draw from them); `tokenizer` is the
    training data's subword tokenizer (engine.data.training_tokenizer), None for words or
    characters."""
    parts: list[CheckpointPart] = [
        DeepSpeedPart(engine),
        RunPart(state),
        StreamPart(streams),
        MemoryPart(memory, world.rank, plan.rows_per_rank, device, config.train.seed, state),
        ThreadsPart(),
    ]
    if tokenizer is not None:
        parts.append(TokenizerPart(tokenizer))
    per_step = plan.rows_per_rank * config.model.tgt_len
    parts.append(TokensPart(seen, world.rank, world.world_size, per_step, state))
    return parts
