"""How much of a model's step the normalization kernels take under torch.compile default: the ceiling on what any
norm fusion can gain there, even one that made the norms free. Issue 7 asks the Llama-style layer for ≥ 3 %.

torch.profiler over a few steps of an e2e.py case compiled by torch.compile (default), each GPU kernel's time per
step, and those that compute a norm or its backward picked by the ops Inductor names its kernels after: a forward
norm has rsqrt (RMSNorm: mean/pow; LayerNorm: var_mean), a backward one sums a product with the saved rstd
(Inductor's names: "..._mul_pow_sum..." / "native_layer_norm_backward"). The classification is printed kernel by
kernel so it can be checked; the norm kernels also carry what Inductor fused into them (a residual add, a cast),
so their share is an upper bound of the norm's own cost.

    python benchmarks/diagnostics/norm_share.py --cases llama_layer bert_base_layer [--modes inference train] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from e2e import CASES, SMOKE, build_case, make_step  # noqa: E402

# forward: rsqrt of a mean of squares or of a variance; backward: the reductions of the norm's backward (the row
# sums have pow from rsqrt's derivative; dγ's column sums are mul_sum). Errs towards counting a kernel as a norm's,
# so that the share is an upper bound (checked on the CPU against the Llama layer's generated kernel names: the
# three norms' forward and backward kernels, and one mul_sum reduction)
NORM_KERNEL = re.compile(r"rsqrt|native_layer_norm|var_mean|pow.*sum|sum.*pow|mul_sum")


def kernel_times(step, steps: int = 5) -> list[tuple[str, float, int]]:
    """(kernel name, ms per step, launches per step) of every GPU kernel, longest first."""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if torch.cuda.is_available() else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(steps):
            step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():  # the kernels themselves, not the CPU ops that launched them (no double count)
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total:
            rows.append((e.key, e.device_time_total / steps / 1e3, e.count // steps))
    return sorted(rows, key=lambda r: -r[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="*", default=["llama_layer", "bert_base_layer"], choices=list(CASES))
    p.add_argument("--modes", nargs="*", choices=["inference", "train"], default=["inference", "train"])
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script runs (CPU: no kernel times)")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    for name in args.cases:
        for train in [mode == "train" for mode in args.modes]:
            model, inputs = build_case((SMOKE if args.smoke else CASES)[name], train, device, dtype)
            torch._dynamo.reset()
            step = make_step(torch.compile(model), inputs, train)
            step(), step()
            if device == "cuda":
                from triton.testing import do_bench

                step_ms = do_bench(step, warmup=10, rep=100, return_mode="median")
            else:
                step_ms = float("nan")
            rows = kernel_times(step)
            total = sum(ms for _, ms, _ in rows)
            norm = [(k, ms, n) for k, ms, n in rows if NORM_KERNEL.search(k)]
            norm_ms = sum(ms for _, ms, _ in norm)
            mode = "train step" if train else "inference"
            print(f"{name} {mode}: step {step_ms:.3f} ms (do_bench), kernels {total:.3f} ms per step; norm kernels "
                  f"{norm_ms:.3f} ms = {100 * norm_ms / max(step_ms, 1e-9):.1f} % of the step", flush=True)
            for key, ms, n in rows[:25]:
                tag = "NORM" if NORM_KERNEL.search(key) else "    "
                print(f"  {tag} {ms:.4f} ms x{n}  {key[:110]}", flush=True)
            for key, ms, n in norm[25:] if len(rows) > 25 else []:
                print(f"  NORM {ms:.4f} ms x{n}  {key[:110]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
