"""What a checkpoint holds, one part each; registry.py lists a run's, save and restore loop.

part.py       CheckpointPart: a name, its Place (record, rank file, main file, DeepSpeed's)
run.py        RunState and its part: restarts, requeues, the saving SLURM job
stream.py     the training streams' position
memory.py     each rank's memories with their global rows, and its RNG states
tokenizer.py  the data's subword tokenizer, as tokenizer.json
tokens.py     the training tokens each rank has seen
threads.py    the compute threads the run trained with, reused on resume
deepspeed.py  DeepSpeed's engine, which writes and loads its own files
registry.py   the parts every checkpoint of a run holds, in the order a resume loads them
"""

from txl_dist.engine.checkpoint.parts.deepspeed import DeepSpeedPart, Location
from txl_dist.engine.checkpoint.parts.memory import MemoryPart
from txl_dist.engine.checkpoint.parts.part import CheckpointPart, Place, rank_file
from txl_dist.engine.checkpoint.parts.run import RunPart, RunState
from txl_dist.engine.checkpoint.parts.stream import StreamPart
from txl_dist.engine.checkpoint.parts.threads import ThreadsPart
from txl_dist.engine.checkpoint.parts.tokenizer import TokenizerPart
from txl_dist.engine.checkpoint.parts.tokens import SeenTokens, TokensPart

__all__ = [
    "CheckpointPart",
    "DeepSpeedPart",
    "Location",
    "MemoryPart",
    "Place",
    "RunPart",
    "RunState",
    "SeenTokens",
    "StreamPart",
    "ThreadsPart",
    "TokenizerPart",
    "TokensPart",
    "rank_file",
]
