"""trainserve: what a model costs to train and to serve, on CPU and GPU, measured side by side."""

from trainserve.core.version import version as _version

__version__ = _version()
