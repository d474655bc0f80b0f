"""The tokens each rank has seen: its own count on the same ranks, the total spread over other
ranks, and the steps' worth from a checkpoint saved before the count existed."""

from txl_dist.engine.checkpoint.parts import RunState, SeenTokens, TokensPart


def part(rank: int, world_size: int) -> TokensPart:
    return TokensPart(SeenTokens(), rank, world_size, per_step=256, run=RunState("r", step=4))


def test_each_rank_continues_its_own_count_or_a_share_of_the_total():
    saved = [{"tokens": 1000}, {"tokens": 1024}]
    same = part(1, 2)
    same.load_state_dict(saved)
    assert same.seen.tokens == 1024 and same.state_dict() == {"tokens": 1024}
    other = part(0, 4)
    other.load_state_dict(saved)
    assert other.seen.tokens == 2024 // 4


def test_a_checkpoint_without_the_count_has_seen_its_steps_worth():
    older = part(0, 2)
    older.load_state_dict(None)
    assert older.seen.tokens == 4 * 256
