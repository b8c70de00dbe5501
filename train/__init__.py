"""Training: model zoo, data, the training loop, its profile, and ONNX export."""
