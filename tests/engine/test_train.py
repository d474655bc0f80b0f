import torch

from txl_dist.engine.train import _checkpoint_layers
from txl_dist.model import TransformerXL, TXLConfig


def test_activation_checkpointing_keeps_loss_and_gradients():
    config = TXLConfig(
        n_token=50, n_layer=2, n_head=2, d_model=8, d_head=4, d_inner=16, dropout=0.0
    )
    ids = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(0))
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = TransformerXL(config)
        if recompute:
            _checkpoint_layers(model)
        out = model(ids, ids, model(ids).mems)
        out.loss.sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for plain, recomputed in zip(*grads):
        torch.testing.assert_close(recomputed, plain)
