"""A torchrun worker of `trainserve train --nproc N`: runs `trainserve <TRAINSERVE_ARGV>` in this process.

train.launch starts `python -m trainserve.commands.train_worker` under torchrun; the worker lives here,
in the command-line layer, because it runs the command line.
"""

from __future__ import annotations

import sys

from trainserve.train.launch import worker_args
from trainserve.cli import main

if __name__ == "__main__":
    sys.argv = ["trainserve", *worker_args()]
    main()
