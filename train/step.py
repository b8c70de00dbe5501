"""One optimisation step, shared by the training loop (train.loop.fit) and the sweep (train.sweep)."""

from __future__ import annotations

from typing import Any

from trainserve.train.device import autocast
from trainserve.train.measure import MemoryTracker, optimizer_state_bytes, tensor_bytes


def train_step(model: Any, forward: Any, loss_fn: Any, x: Any, y: Any, optimizer: Any, scaler: Any, scaling: bool,
               device: str, precision: str, memory: MemoryTracker | None = None) -> tuple[Any, Any]:
    """Forward under autocast, backward (through the grad scaler when `scaling`), optimizer step;
    (logits, loss). With `memory` (the first step), the gradients' and optimizer state's bytes and the
    memory after backward and after the step are recorded. Gradients are left for the caller to zero."""
    with autocast(device, precision):
        logits = forward(x)
        loss = loss_fn(logits.float(), y)
    if scaling:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if memory is not None:
        memory.gradients = tensor_bytes(p.grad for p in model.parameters())
        memory.moment("after_backward")
    if scaling:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    if memory is not None:
        memory.optimizer = optimizer_state_bytes(optimizer)
        memory.moment("after_step")
    return logits, loss
