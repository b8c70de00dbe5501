"""trainserve: what a model costs to train and to serve, on CPU and GPU, measured side by side."""

__version__ = "0.1.0"
