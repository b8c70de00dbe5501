"""Telling NVIDIA Triton and the embedded server apart, now that both call themselves "triton"."""

from __future__ import annotations

import pytest

from trainserve.loadtest.model_info import EMBEDDED_EXTENSION, ModelInfo, fetch_model_info
from tests.serve.conftest import ThreadServer
from tests.serve.tiny_models import make_repository

# what NVIDIA Triton 24.x lists (its server metadata), none of them the embedded marker
TRITON_EXTENSIONS = ["classification", "sequence", "model_repository", "model_repository(unload_dependents)",
                     "schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory",
                     "binary_tensor_data", "parameters", "statistics", "trace", "logging"]


def test_triton_is_triton_and_the_embedded_server_is_onnxruntime():
    triton = ModelInfo("m", [], [], server_name="triton", server_version="2.45.0", server_extensions=TRITON_EXTENSIONS)
    embedded = ModelInfo("m", [], [], server_name="triton", server_version="0.1.0",
                         server_extensions=["binary_tensor_data", "statistics", EMBEDDED_EXTENSION])
    assert (triton.backend, triton.server_label) == ("triton", "triton")
    assert (embedded.backend, embedded.server_label) == ("onnxruntime", "trainserve")
    assert ModelInfo("m", [], [], server_name="stub-kserve").backend == "onnxruntime"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_real_embedded_server_is_recognised_over_both_protocols(tmp_path, protocol):
    srv = ThreadServer(make_repository(tmp_path / "repo"), server_options={"grpc_port": 0}).start()
    try:
        url = f"127.0.0.1:{srv.ports[protocol]}"
        info = fetch_model_info(url, "classifier", protocol)
    finally:
        srv.stop()
    assert info.server_name == "triton" and info.backend == "onnxruntime" and info.server_label == "trainserve"
    assert info.frontends == 1  # the served config's parameter, which load records carry
