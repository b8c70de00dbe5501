"""Run by tests/gpu/test_cuda_pipeline.py in a child process: the exported fp16 model on onnxruntime's CUDA
provider against the fp32 model on the CPU, at batch 1 and 64. Prints one JSON line.

A child, so the test process never holds a CUDA context of its own (the NVML release test reads the whole
device's memory) and onnxruntime's CUDA libraries are loaded as in a fresh server.

    python tests/gpu/fp16_on_cuda.py RUN_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(run: Path) -> None:
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # the CUDA libraries pip's nvidia packages ship, as serve/model/sessions.py loads them
    from trainserve.core.card import ModelCard, example_inputs
    from trainserve.train import verify

    card = ModelCard.load(run / "train")
    fp32 = verify.cpu_session(run / "export" / "model.onnx")
    fp16 = verify.ort_session(run / "export" / "model.fp16.onnx", "CUDAExecutionProvider")  # refuses a fallback
    names = [o.name for o in fp32.get_outputs()]
    batches = {}
    for batch in (1, 64):
        inputs = example_inputs(card, batch, seed=11)
        want = dict(zip(names, fp32.run(names, inputs)))
        got = dict(zip(names, fp16.run(names, inputs)))
        batches[batch] = {name: c["max_rel"] for name, c in verify.compare(got, want).items()}
    print(json.dumps({"providers": fp16.get_providers(), "tolerance_rel": verify.TOLERANCE_REL["fp16"],
                      "max_rel": batches}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
