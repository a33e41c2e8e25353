"""What each entry point does on the GPU this runs on, where algosel may have no model for it (GPU).

    python benchmarks/new_gpu_check.py [--out FILE.json]

Runs, in this order, and reports each outcome (never stops at one): ``algosel doctor``'s verdict on the hook,
``algosel.predict`` of a ResNet layer (its pick, or its one-line refusal), and three training steps of a small
network under ``algosel.hook.enabled()`` (whether the steps ran, the warnings the hook gave, its route reasons).
On a GPU that a shipped model covers it shows the model in use; on one that none covers, what the user is told.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch  # noqa: PLC0415

    import algosel  # noqa: PLC0415
    from algosel import hook  # noqa: PLC0415
    from algosel.runtime import doctor  # noqa: PLC0415

    if not torch.cuda.is_available():
        sys.exit("new_gpu_check needs a CUDA GPU")
    facts = doctor.collect([])
    out: dict = {"gpu": torch.cuda.get_device_name(), "doctor": doctor.hook_verdict(facts)}
    out["default_models"] = {s: d.get("model") or d.get("error") for s, d in facts["default_models"].items()}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            pick = algosel.predict(n=32, c=256, k=256, h=14, w=14, r=3, s=3, pad_h=1, pad_w=1)
            out["predict"] = {"pick": pick[0].candidate_id}
        except Exception as exc:  # noqa: BLE001 - the outcome is the report
            out["predict"] = {"error": f"{type(exc).__name__}: {exc}"}
    out["predict"]["warnings"] = [str(w.message) for w in said]
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1)
    ).cuda()
    x = torch.randn(8, 3, 32, 32, device="cuda")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        steps = 0
        try:
            with hook.enabled() as ex:
                for _ in range(3):
                    net(x).sum().backward()
                    steps += 1
                torch.cuda.synchronize()
                out["hook"] = {"steps": steps, "route_reasons": ex.route_reasons()}
        except Exception as exc:  # noqa: BLE001 - the outcome is the report
            out["hook"] = {"steps": steps, "error": f"{type(exc).__name__}: {exc}"}
    out["hook"]["warnings"] = [f"{w.category.__name__}: {w.message}" for w in said]
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
