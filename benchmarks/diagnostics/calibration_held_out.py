"""How well a calibration file's constants predict a site they were not fitted on (CPU; issue 27).

``python -m norm_fusion_inductor calibrate`` measures one timing per grid site and fits the cost model's constants
to all of them; its table shows the in-sample error. This refits the constants once per site with that site left
out (``calibrate.fit``, as the command fits, ``fit_alu`` on) and compares, per site, the predicted speedup of the
Triton epilogue GEMM over the unfused bound (cuBLAS + the saved bytes' copy) with the measured one: wholly
predicted, and as the selection uses the model (cuBLAS and the copy measured, only the fused GEMM predicted). The
committed table of the file's GPU model (``cost_model.CALIBRATION``), or the reference GPU's, is scored the same
way for comparison.

    python benchmarks/diagnostics/calibration_held_out.py benchmarks/results/gpu-2026-12-05b/call_b/calibration_h100.json
"""

import argparse
import copy
import json
import statistics
import sys

from norm_fusion_inductor import calibrate
from norm_fusion_inductor import cost_model as cm


def load(path: str):
    with open(path) as f:
        data = json.load(f)
    fields = set(calibrate.Measurement.__dataclass_fields__)
    records = [calibrate.Measurement(**{k: v for k, v in s.items() if k in fields}) for s in data["sites"]]
    hardware = {k: copy.deepcopy(data["calibration"][k]) for k in ("sms", "peak_flops", "hbm_bytes_per_ms", "l2_bytes")}
    hardware["peak_flops"] = {int(e): float(p) for e, p in hardware["peak_flops"].items()}
    return data["gpu"], records, hardware


def speedups(cal: dict, r: calibrate.Measurement) -> tuple:
    """(wholly predicted, as the selection) speedups of the Triton GEMM over the unfused bound."""
    p = calibrate.predicted(cal, r)
    return (p["mm_ms"] + p["saved_ms"]) / p["triton_ms"], (r.mm_ms + r.saved_ms) / p["triton_ms"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="a calibration file (calibrate --out, or <cache folder>/calibration/<gpu>.json)")
    args = ap.parse_args(argv)
    gpu, records, hardware = load(args.file)
    records = [r for r in records if r.triton_ms is not None]
    base = copy.deepcopy(cm.CALIBRATION.get(gpu) or cm.CALIBRATION[calibrate.REFERENCE_GPU])
    base.update(hardware)
    committed = cm.CALIBRATION.get(gpu) or cm.CALIBRATION[calibrate.REFERENCE_GPU]
    committed_name = "committed table" if gpu in cm.CALIBRATION else f"{calibrate.REFERENCE_GPU}'s table"
    errs: dict = {"held out": [], "held out, as the selection": [], f"{committed_name}, as the selection": []}
    print(f"# {gpu}: {len(records)} sites of {args.file}")
    print("| kind | activation | M×K×N | measured speedup | held out | as the selection | "
          f"{committed_name}, as the selection |")
    print("|---|---|---|---:|---:|---:|---:|")
    for i, r in enumerate(records):
        measured = (r.mm_ms + r.saved_ms) / r.triton_ms
        cal = calibrate.fit(records[:i] + records[i + 1:], base, fit_alu=True)
        whole, selection = speedups(cal, r)
        table = speedups(committed, r)[1]
        row = [whole / measured - 1, selection / measured - 1, table / measured - 1]
        for name, e in zip(errs, row):
            errs[name].append(e)
        print(f"| {r.kind} | {r.activation or ''}{' +aux' if r.aux else ''} | {r.M}×{r.K}×{r.N} | {measured:.3f} | "
              + " | ".join(f"{e:+.1%}" for e in row) + " |")
    print()
    for name, v in errs.items():
        print(f"{name}: {sum(abs(e) <= 0.10 for e in v)} of {len(v)} within ±10 %, "
              f"median |error| {statistics.median(abs(e) for e in v):.1%}, worst {max(v, key=abs):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
