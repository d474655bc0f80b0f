"""How both streams read: a block's size, the stream's own where Reading leaves it open."""

from data_pipeline import Reading, TokenStreams
from data_pipeline.streams import mixing, token_streams


def test_a_block_holds_the_steps_of_its_tokens_and_at_least_one():
    assert Reading(block_tokens=4000).steps_per_block(3, 128, own_block_tokens=1 << 22) == 10
    assert Reading(block_tokens=100).steps_per_block(3, 128, own_block_tokens=1 << 22) == 1
    assert Reading().steps_per_block(3, 128, own_block_tokens=3 * 128 * 7) == 7


def test_a_stream_reads_as_its_reading_says_and_else_in_its_own_blocks(wt103_valid):
    given = TokenStreams(wt103_valid, 2, 64, reading=Reading(prefetch=1, block_tokens=1280))
    assert (given.prefetch, given.steps_per_block) == (1, 10)
    own = TokenStreams(wt103_valid, 2, 64)
    assert own.steps_per_block == token_streams.BLOCK_TOKENS // (2 * 64)
    assert mixing.BLOCK_TOKENS < token_streams.BLOCK_TOKENS  # a walk in Python reads less ahead
