"""The GPU tier (`pytest -m gpu`): tests that need CUDA, skipped where there is none.

With TRAINSERVE_REQUIRE_GPU=1 (the GPU host, benchmarks/gpu_session.sh's gpu-tier phase) a missing GPU, a
torch without CUDA or an onnxruntime without its CUDA provider is an error instead, so a broken GPU setup
cannot pass as a skipped tier. The check reads NVML first and imports torch and onnxruntime only when NVML
sees a GPU: on a machine without one the tier costs next to nothing.
"""

from __future__ import annotations

import os

import pytest

from trainserve.core import envs
from trainserve.core.telemetry import Nvml

REQUIRE_ENV = envs.REQUIRE_GPU.name


def cuda_missing() -> str | None:
    """Why the GPU tier cannot run here, or None when NVML, torch and onnxruntime all see CUDA."""
    nv = Nvml(0)
    if not nv.ok:
        return "NVML sees no NVIDIA GPU (or nvidia-ml-py is missing)"
    nv.close()
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (a CPU build?)"
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (install onnxruntime-gpu)"
    return None


def gate(reason: str | None, env: dict[str, str]) -> None:
    """Nothing when CUDA is there (`reason` None); else fail where the environment requires the GPU, or skip."""
    if reason is None:
        return
    if envs.REQUIRE_GPU.parse(env.get(REQUIRE_ENV, envs.REQUIRE_GPU.default)):
        pytest.fail(f"{REQUIRE_ENV}=1 but the GPU tier cannot run: {reason}", pytrace=False)
    pytest.skip(f"needs CUDA: {reason}")


@pytest.fixture(scope="session")
def cuda_checked() -> None:
    gate(cuda_missing(), dict(os.environ))


@pytest.fixture(autouse=True)
def _needs_cuda(cuda_checked) -> None:
    """Every test of this folder runs only with CUDA (see the module docstring)."""

