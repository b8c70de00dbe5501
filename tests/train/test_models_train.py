import pytest
import torch

from trainserve.train.models import build_model, preset_config


@pytest.mark.parametrize("family", ["mlp", "cnn", "transformer"])
def test_forward_backward_on_cpu(family):
    cfg = preset_config(family, "tiny")
    model = build_model(cfg)
    if family == "mlp":
        x = torch.randn(4, cfg.in_features)
    elif family == "cnn":
        x = torch.randn(4, 3, 32, 32)
    else:
        x = torch.randint(0, cfg.vocab_size, (4, cfg.seq_len))
    logits = model(x)
    assert logits.shape == (4, cfg.num_classes)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3])).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum().item() for g in grads) > 0
