"""Sharded data-parallel training (`trainserve train --nproc N --shard`): FSDP2's `fully_shard`.

Under DDP every process holds the whole model, its gradients and its optimizer state. `fully_shard` splits
each parameter along its first dimension across the N processes instead: a process holds about 1/N of the
parameters, of the gradients and of the optimizer state, gathers a layer's full parameters just before its
forward and backward, and frees them after (reduce-scatter for the gradients). The arithmetic is DDP's, so
N sharded processes train as N replicated ones do; what changes is each process's memory, which is what a
model too large for one device needs. Each submodule that holds parameters of its own is one unit of
gathering (the zoo's layers), then the root.

It runs on the CPU with gloo (the tests) and on GPUs with NCCL; on a GPU, `--offload` keeps the shards in
host memory instead (FSDP2's CPUOffloadPolicy), so the card holds only the layers in use and the activations. A checkpoint is written whole, gathered to
the process that writes it (`full_state`), so export and a single-process run read it as any other; `--resume`
loads it back into the shards (`load_full_state`).
"""

from __future__ import annotations

from typing import Any


def shard(model: Any, offload: bool = False) -> Any:
    """Shard `model` in place across the default process group: each child holding parameters, then the root.
    offload: each rank's shards of parameters, gradients and optimizer state live in (pinned) host memory, a
    unit's parameters copied to the GPU for its forward and backward, the optimizer step run on the CPU."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    policy = CPUOffloadPolicy() if offload else OffloadPolicy()
    for child in model.children():
        if any(True for _ in child.parameters()):
            fully_shard(child, offload_policy=policy)
    fully_shard(model, offload_policy=policy)
    return model


def local(t: Any) -> Any:
    """This process's part of a (possibly sharded) tensor: what it actually holds in memory."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def full_state(model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole model's and optimizer's state dicts on the CPU, gathered from every process (a collective:
    every process calls it; each gets the full state, the writer saves it)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=opts), get_optimizer_state_dict(model, optimizer, options=opts)


def load_full_state(model: Any, optimizer: Any, model_state: dict[str, Any], optimizer_state: dict[str, Any]) -> None:
    """Load whole state dicts (as full_state wrote them; every process holds them) into the sharded model and
    its optimizer: each process keeps its own shards."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, model_state, options=opts)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=opts)
