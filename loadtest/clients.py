"""One inference call, prepared once and repeated: over HTTP (binary tensors) or gRPC, via tritonclient.

The request tensors (InferInput objects) are built once per user. On HTTP the default path goes one
step further: tritonclient's own `generate_request_body` encodes the request once, and each call
writes those same bytes (with the headers tritonclient sends) on a keep-alive connection
(loadtest/rawhttp.py), so the server sees the binary-tensor request `InferenceServerClient.infer`
would send, without re-encoding JSON and tensors and rebuilding headers on every call.
`http_client="tritonclient"` calls `InferenceServerClient.infer` each time instead.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import numpy as np

from trainserve.loadtest.model_info import ModelInfo
from trainserve.loadtest.rawhttp import RawHttpClient, encode_request, header


class HttpInfer:
    """`call()` sends one binary-tensor inference request; returns (response bytes, outputs or None)."""

    def __init__(self, url: str, info: ModelInfo, arrays: dict[str, np.ndarray], *, concurrency: int = 1,
                 mode: str = "prepared", want_outputs: bool = False, timeout_s: float = 60.0) -> None:
        import tritonclient.http as th

        self.model = info.name
        self.want_outputs = want_outputs
        self.inputs = []
        for spec in info.inputs:
            inp = th.InferInput(spec.name, list(arrays[spec.name].shape), spec.datatype)
            inp.set_data_from_numpy(arrays[spec.name], binary_data=True)
            self.inputs.append(inp)
        self.outputs = [th.InferRequestedOutput(o.name, binary_data=True) for o in info.outputs]
        self.mode = mode
        if mode == "tritonclient":
            self.client = th.InferenceServerClient(url, concurrency=concurrency, connection_timeout=timeout_s,
                                                   network_timeout=timeout_s)
            return

        # tritonclient encodes the request once; these are the bytes its own infer() would send
        body, json_size = th.InferenceServerClient.generate_request_body(self.inputs, outputs=self.outputs)
        headers = {"Inference-Header-Content-Length": str(json_size)} if json_size is not None else {}
        host, _, port = url.rpartition(":")
        self.request = encode_request("POST", url, f"/v2/models/{quote(info.name)}/infer", headers, body)
        self.http = RawHttpClient(host, int(port), concurrency=concurrency, timeout_s=timeout_s)

    def call(self) -> tuple[int, dict[str, np.ndarray] | None]:
        if self.mode == "tritonclient":
            result = self.client.infer(self.model, self.inputs, outputs=self.outputs)
            outputs = {o.name(): result.as_numpy(o.name()) for o in self.outputs}
            return sum(a.nbytes for a in outputs.values()), outputs
        status, head, data = self.http.send(self.request)
        if status != 200:
            raise _http_error(status, data)
        if not self.want_outputs:  # validation off: the answer's tensors are never decoded
            return len(data), None
        return len(data), self._outputs(data, header(head, "inference-header-content-length"))

    def _outputs(self, data: bytes, header_length: str | None) -> dict[str, np.ndarray]:
        from tritonclient.http import InferResult

        result = InferResult.from_response_body(data, header_length=int(header_length) if header_length else None)
        return {o.name(): result.as_numpy(o.name()) for o in self.outputs}

    def close(self) -> None:
        if self.mode == "tritonclient":
            self.client.close()
        else:
            self.http.close()


def _http_error(status: int, data: bytes) -> Exception:
    """The same InferenceServerException tritonclient raises for a non-200 answer."""
    import json

    from tritonclient.utils import InferenceServerException

    try:
        msg = json.loads(data)["error"]
    except (ValueError, KeyError, TypeError):
        msg = data[:200].decode("utf-8", "replace") or "empty response"
    return InferenceServerException(msg=msg, status=str(status))


class GrpcInfer:
    """`call()` sends one gRPC ModelInfer request; returns (output bytes, outputs or None)."""

    def __init__(self, url: str, info: ModelInfo, arrays: dict[str, np.ndarray], *,
                 want_outputs: bool = False, timeout_s: float = 60.0) -> None:
        import tritonclient.grpc as tg

        self.model = info.name
        self.want_outputs = want_outputs
        self.timeout_s = timeout_s
        self.inputs = []
        for spec in info.inputs:
            inp = tg.InferInput(spec.name, list(arrays[spec.name].shape), spec.datatype)
            inp.set_data_from_numpy(arrays[spec.name])
            self.inputs.append(inp)
        self.outputs = [tg.InferRequestedOutput(o.name) for o in info.outputs]
        self.client = tg.InferenceServerClient(url)

    def call(self) -> tuple[int, dict[str, np.ndarray] | None]:
        result = self.client.infer(self.model, self.inputs, outputs=self.outputs, client_timeout=self.timeout_s)
        raw: Any = result.get_response().raw_output_contents
        size = sum(len(r) for r in raw)
        if not self.want_outputs:
            return size, None
        return size, {o.name(): result.as_numpy(o.name()) for o in self.outputs}

    def close(self) -> None:
        self.client.close()
