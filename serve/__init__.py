"""Serving: the Triton model repository, and the embedded KServe v2 server on onnxruntime."""
