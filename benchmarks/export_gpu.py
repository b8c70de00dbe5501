"""Export the zoo and check the variants where they will be served: fp32/fp16 on the CUDA provider.

Run on a GPU machine from the repository root:

    OUT=./bench-out python benchmarks/export_gpu.py [--preset small] [--families mlp,cnn,transformer]

For each family (random weights: numerics and speed do not depend on training) it runs the normal
export stage (CPU verification, model repository) under $OUT/runs/<family>, then, per variant and
provider (CPU: fp32, fp16, int8; CUDA: fp32, fp16), the error against PyTorch fp32 at batch 1 and 64
and the median latency of one onnxruntime call (ms, 5 warm-up + 30 timed calls; inputs already in
host memory, outputs copied back). Writes $OUT/export_gpu.json. Without CUDA it records why and
measures the CPU only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--families", default="mlp,cnn,transformer")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    import onnxruntime as ort
    import torch

    from trainserve.serve.repository import RepositoryConfig
    from trainserve.core.card import ModelCard, TensorSpec
    from trainserve.train.export import ExportConfig, example_inputs, export_run
    from trainserve.train.models import build_model, config_to_dict, io_spec, preset_config
    from trainserve.train.verify import compare, ort_session, torch_outputs
    from trainserve.core.errors import UserError

    out = Path(os.environ.get("OUT", "./bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    batches = [int(b) for b in args.batches.split(",")]
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    results = {"date": time.strftime("%Y-%m-%d"), "host": platform.node(), "cpu_count": os.cpu_count(),
               "torch": torch.__version__, "onnxruntime": ort.__version__, "providers": ort.get_available_providers(),
               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
               "preset": args.preset, "models": {}}
    for family in args.families.split(","):
        torch.manual_seed(0)
        config = preset_config(family, args.preset)
        ins, outs = io_spec(config)
        card = ModelCard(family=family, preset=args.preset, config=config_to_dict(config),
                         inputs=[TensorSpec(**t) for t in ins], outputs=[TensorSpec(**t) for t in outs],
                         classes=[str(i) for i in range(config.num_classes)])
        model = build_model(config).eval()
        train_dir = out / "runs" / family / "train"
        train_dir.mkdir(parents=True, exist_ok=True)
        card.save(train_dir)
        torch.save({"model": model.state_dict(), "epoch": 0, "step": 0, "card": card.to_dict()}, train_dir / "checkpoint.pt")
        t0 = time.perf_counter()
        try:
            res = export_run(train_dir.parent, train_dir / "checkpoint.pt", train_dir / "model.json",
                             ExportConfig(eval_limit=512, seed=0), RepositoryConfig())
            entry = {"export_s": round(time.perf_counter() - t0, 2), "exporter": res.export["exporter"],
                     "opset": res.export["opset"], "bytes": res.files,
                     "cpu_verify": {v: {"max_rel": r["max_rel"], "accuracy_delta": r["accuracy_delta"]}
                                    for v, r in res.verify["variants"].items()}, "runs": []}
        except UserError as e:
            results["models"][family] = {"error": str(e)}
            continue
        plan = [("CPUExecutionProvider", v) for v in ("fp32", "fp16", "int8")]
        if cuda:
            plan += [("CUDAExecutionProvider", v) for v in ("fp32", "fp16")]
        else:
            entry["cuda_skipped"] = "CUDAExecutionProvider not available in this onnxruntime"
        for provider, variant in plan:
            path = res.export_dir / res.export["variants"][variant]["file"]
            row = {"provider": provider, "variant": variant}
            try:
                session = ort_session(path, provider)
            except UserError as e:
                row["error"] = str(e)
                entry["runs"].append(row)
                continue
            for b in batches:
                inputs = example_inputs(card, b, seed=100 + b)
                err = compare(dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs))),
                              torch_outputs(model, inputs, card))["logits"]
                for _ in range(5):
                    session.run(None, inputs)
                times = []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    session.run(None, inputs)
                    times.append((time.perf_counter() - t) * 1e3)
                row[f"batch{b}"] = {"max_rel": err["max_rel"], "max_abs": err["max_abs"],
                                    "p50_ms": statistics.median(times), "min_ms": min(times)}
            entry["runs"].append(row)
            print(family, provider, variant, {k: v for k, v in row.items() if k.startswith("batch")}, flush=True)
        results["models"][family] = entry
        (out / "export_gpu.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "export_gpu.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out / 'export_gpu.json'}")


if __name__ == "__main__":
    main()
