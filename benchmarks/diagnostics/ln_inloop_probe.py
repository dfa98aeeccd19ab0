"""Where does the in-loop LayerNorm plan go wrong on the GPU? (issue 3; NOTES.md "LayerNorm → matmul")

The in-loop LayerNorm kernel gave relative errors of 0.05–0.38 (and 2.3e2 at |mean| = 1000 std) in two of five
block configs on the H200, while its mean/rstd were right and the RMSNorm in-loop kernel, with the same async
register-A wgmma, was right everywhere. What only LayerNorm adds: the per-row shift s = x[m, 0] loaded with
pointers, ``tl.where(offs_k < K, x − s, 0)`` on the A tile, the Σ(x − s) accumulator, and the u column vector
in the epilogue. This script runs every in-loop config of the kernel and of copies of norm_gemm.py with one of
those pieces changed, each against its own float64 reference, in one GPU call. The answer (H200, 2026-11-30,
BENCHMARKS.md): the tl.where — without it every config was right. The kernel now has it only where a K tile
reaches past K (EVEN_K = False, never on the GPU), so the variants put it back to re-check the miscompile:

    as_is            the kernel as shipped (K % BLOCK_K == 0: no tl.where)
    with_where       the masked branch forced on (the kernel of 2026-11-29/30: two configs wrong)
    where_no_shift   and s = 0                        (reference: LayerNorm, same as the kernel)
    where_no_u       and the epilogue drops −(μ − s)·u (reference: rstd·((x − s)·γ)Wᵀ + Wβ + b)

    python benchmarks/diagnostics/ln_inloop_probe.py [--shape 4096x1024x768] [--shift 0 1000]

Under TRITON_INTERPRET=1 (CPU, with --dtype float16: the interpreter's bf16 dots are wrong) it runs the interpreter
config only: a check of the script, not of the GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import tempfile

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.helpers import ln_linear_reference64, rel_err  # noqa: E402

from norm_fusion_inductor.kernels import norm_gemm  # noqa: E402

SHIFT = "            shift = tl.load(x_ptr + offs_m * stride_xm, mask=offs_m < M, other=0.0).to(tl.float32)\n"
WHERE = ("                    if not EVEN_K:  # columns past K read 0 through TMA: x − s would add −s to the sums "
         "there\n")
U_TERM = "                acc = (acc - mean_shifted[:, None] * u[None, :]) * rstd[:, None]\n"
FORCE_WHERE = (WHERE, "                    if True:\n")
VARIANTS = {
    "as_is": [],
    "with_where": [FORCE_WHERE],
    "where_no_shift": [FORCE_WHERE, (SHIFT, "            shift = tl.zeros([BLOCK_M], tl.float32)\n")],
    "where_no_u": [FORCE_WHERE, (U_TERM, "                acc = acc * rstd[:, None]\n")],
}


def variant_module(name: str, tmp: pathlib.Path):
    """norm_gemm.py with VARIANTS[name]'s replacements, imported from a file (Triton reads kernels' source)."""
    source = pathlib.Path(norm_gemm.__file__).read_text()
    for old, new in VARIANTS[name]:
        assert source.count(old) == 1, f"{name}: the kernel no longer has {old.strip()!r}"
        source = source.replace(old, new)
    path = tmp / f"norm_gemm_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"norm_gemm_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def reference(name, x, gamma, beta, w, bias, eps):
    if name != "where_no_u":
        return ln_linear_reference64(x, gamma, beta, w, bias, eps)[0]
    xd = x.double()
    var, mean = torch.var_mean(xd, -1, correction=0, keepdim=True)
    shifted = (xd - xd[:, :1]) * gamma.double()  # what the loop feeds the dot, without the epilogue's μ·u
    return torch.rsqrt(var + eps) * (shifted @ w.double().t()) + beta.double() @ w.double().t() + bias.double()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="4096x1024x768")
    p.add_argument("--shift", type=float, nargs="+", default=[0.0, 1000.0])
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    M, K, N = (int(v) for v in args.shape.split("x"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dt = getattr(torch, args.dtype)
    configs = norm_gemm._GPU_CONFIGS if device == "cuda" else [norm_gemm._INTERPRETER_CONFIG]
    with tempfile.TemporaryDirectory() as tmp:
        modules = {name: variant_module(name, pathlib.Path(tmp)) for name in VARIANTS}
        for shift in args.shift:
            torch.manual_seed(0)
            x = (torch.randn(M, K, device=device) + shift).to(dt)
            gamma = (torch.rand(K, device=device) + 0.5).to(dt)
            beta = torch.randn(K, device=device).to(dt)
            w = (torch.randn(N, K, device=device) / K**0.5).to(dt)
            bias = torch.randn(N, device=device).to(dt)
            for name, module in modules.items():
                if name == "where_no_shift" and shift:
                    continue  # without the shift the sums cancel at |mean| >> std: not what is probed
                ref = reference(name, x, gamma, beta, w, bias, 1e-5)
                for cfg in configs:
                    short = {k: cfg[k] for k in ("BLOCK_N", "BLOCK_K", "num_warps", "FLATTEN")}
                    try:
                        out = module.layer_norm_matmul(x, gamma, beta, w, bias, 1e-5, plan=("in_loop", cfg))[0]
                        print(f"{name} shift={shift:g} {short}: out {rel_err(out, ref):.1e}", flush=True)
                    except Exception as e:
                        print(f"{name} shift={shift:g} {short}: {type(e).__name__} {str(e)[:120]}", flush=True)


if __name__ == "__main__":
    main()
