"""The adaptive softmax touches the same parameters in the same order whatever the targets.

Under ZeRO-3 every parameter access is a collective, so a batch that skips a tail cluster on one
rank and not on another makes the ranks disagree (a crash on gloo, a hang on NCCL).
"""

import pytest
import torch
from torch.overrides import TorchFunctionMode

from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.adaptive import IGNORE_INDEX, RowBlocks


class ParameterUse(TorchFunctionMode):
    """Records the parameters passed to torch functions, in call order."""

    def __init__(self, names: dict[int, str]):
        super().__init__()
        self.names, self.used = names, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        for arg in [*args, *(kwargs or {}).values()]:
            for item in arg if isinstance(arg, (list, tuple)) else [arg]:
                if id(item) in self.names:
                    self.used.append(self.names[id(item)])
        return func(*args, **(kwargs or {}))


def forward_backward_trace(model: TransformerXL, targets: torch.Tensor) -> tuple[list, list]:
    """(parameters used in forward, parameters whose gradient arrived in backward), in order."""
    names = {id(p): name for name, p in model.named_parameters()}
    arrived = []
    hooks = [
        p.register_post_accumulate_grad_hook(lambda p: arrived.append(names[id(p)]))
        for p in model.parameters()
    ]
    input_ids = torch.zeros_like(targets)
    with ParameterUse(names) as use:
        loss = model(input_ids, targets).loss
    loss.sum().backward()
    for hook in hooks:
        hook.remove()
    model.zero_grad()
    return use.used, arrived


def config(**overrides) -> TXLConfig:
    values = dict(n_token=300, n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, dropout=0.0)
    return TXLConfig(**{**values, **overrides})


@pytest.mark.parametrize(
    "overrides",
    [dict(cutoffs=[50, 150], div_val=2), dict(cutoffs=[50, 150], div_val=1, d_embed=32)],
)
def test_parameter_order_does_not_depend_on_the_clusters_a_batch_holds(overrides):
    torch.manual_seed(0)
    model = TransformerXL(config(**overrides))
    head_only = torch.randint(0, 50, (2, 6))
    every_cluster = torch.tensor([[1, 60, 200, 299, 3, 4], [100, 160, 7, 8, 9, 10]])
    with_padding = head_only.clone()
    with_padding[:, -2:] = IGNORE_INDEX  # evaluation pads a row's tail
    reference = forward_backward_trace(model, every_cluster)
    assert set(reference[1]) == {name for name, _ in model.named_parameters()}
    for targets in (head_only, with_padding):
        assert forward_backward_trace(model, targets) == reference


def test_rows_of_one_cluster_give_the_same_nll_as_a_mixed_batch():
    torch.manual_seed(0)
    model = TransformerXL(config(cutoffs=[50, 150], div_val=2)).eval()
    mixed = torch.tensor([[1, 60, 200, 299, 3, 4]])
    hidden = torch.randn(6, 16)
    together = model.crit(hidden, mixed.view(-1))
    alone = torch.stack(
        [model.crit(hidden[i : i + 1], mixed.view(-1)[i : i + 1]) for i in range(6)]
    )
    torch.testing.assert_close(together, alone.view(-1), rtol=0, atol=0)
    padded = model.crit(hidden, torch.tensor([1, 60, IGNORE_INDEX, 299, 3, IGNORE_INDEX]))
    assert (
        padded[2] == 0
        and padded[5] == 0
        and torch.equal(padded[[0, 1, 3, 4]], together[[0, 1, 3, 4]])
    )


def test_target_outside_the_vocabulary_is_an_error_not_a_zero_loss():
    model = TransformerXL(config(cutoffs=[50, 150], div_val=2))
    with pytest.raises(ValueError, match=r"outside \[0, n_token=300\)"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.tensor([[1, 300, 2]]))


def test_row_blocks_join_their_gradients_in_one_pass_unused_blocks_zero():
    """The tied table's blocks (head, tails) give the table the gradient slicing gives, a
    block no loss reached included (zeros)."""
    table = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)

    def used_blocks(t):
        first, _, last = RowBlocks.apply(t, (2, 4, 1))
        return first * 2, last**2

    assert torch.autograd.gradcheck(used_blocks, (table,))
    first, last = used_blocks(table)
    (first.sum() + last.sum()).backward()
    sliced = table.detach().clone().requires_grad_()
    ((sliced[:2] * 2).sum() + (sliced[6:] ** 2).sum()).backward()
    assert torch.equal(table.grad, sliced.grad)
