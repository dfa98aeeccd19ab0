"""Where the host time of one regrouped epilogue GEMM call goes, per backend (µs per call, calls queued without
waiting for the GPU, ``timing.host_ms``): the op as a compiled graph calls it (``torch.ops.norm_fusion.
epilogue_gemm``), its Python body (``regrouped.run_epilogue_gemm``), the kernel wrapper (Triton's
``epilogue_gemm``, Quack's ``quack_epilogue_gemm.epilogue_gemm``) and, for Triton, the launch alone with the tuned
config; then a cProfile (built-ins included) of the op's calls on each backend. The selection prices an op call
at GPU + this host time where no CUDA graph replays it (``selection.choose_epilogue_gemm``), so it decides
whether Quack can ever be chosen without CUDA graphs.

    python benchmarks/diagnostics/epilogue_host.py [MxKxN ...] [--calls 200]

Each shape runs two epilogues: a consumer (RMSNorm scale, SiLU·mul of a gated pair) and the stream's producer
(residual, RMS statistics). GPU only.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:  # run from a checkout without an install
    sys.path.insert(0, ROOT)

from norm_fusion_inductor import regrouped  # noqa: E402
from norm_fusion_inductor.kernels import epilogue_gemm as eg  # noqa: E402
from norm_fusion_inductor.kernels import quack_epilogue_gemm as qg  # noqa: E402
from norm_fusion_inductor.timing import graph_ms, host_ms  # noqa: E402

EPILOGUES = {  # name: (op keyword arguments besides the tensors, whether it reads a residual)
    "consumer rms+silu_mul": (dict(row_norm="rms", activation="silu_mul", write_aux=False, stats="none"), False),
    "producer residual+rms stats": (dict(row_norm="none", activation="none", write_aux=False, stats="rms"), True),
}


def tensors(M, K, N, residual, dt=torch.bfloat16):
    a = torch.randn(M, K, device="cuda", dtype=dt)
    w = torch.randn(N, K, device="cuda", dtype=dt) / K ** 0.5
    bias = torch.rand(N, device="cuda", dtype=torch.float32)
    res = torch.randn(M, N, device="cuda", dtype=dt) if residual else None
    scale = torch.rand(M, device="cuda", dtype=torch.float32) + 0.5
    return a, w, bias, res, scale


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", default=["16384x2048x2048", "262144x256x1024"])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  quack {qg.version()}")
    print("| M×K×N | epilogue | backend | GPU ms | op µs | body µs | wrapper µs | launch µs |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    profiles = []
    for shape in args.shapes:
        M, K, N = (int(v) for v in shape.split("x"))
        for name, (kw, residual) in EPILOGUES.items():
            a, w, bias, res, scale = tensors(M, K, N, residual)
            if kw["row_norm"] == "none":
                scale = None
            epilogue = regrouped._epilogue(kw["row_norm"], kw["activation"], kw["write_aux"], kw["stats"], True,
                                           residual, "none")
            for backend in ("triton", "quack"):
                if backend == "quack" and (qg.version() is None or qg.unsupported_reason(a, w, False, epilogue)):
                    continue

                def op():
                    return torch.ops.norm_fusion.epilogue_gemm(a, w, bias, res, scale, None, None, w_kn=False,
                                                               backend=backend, **kw)

                def body():
                    return regrouped.run_epilogue_gemm(a, w, bias, res, scale, None, None, w_kn=False,
                                                       backend=backend, **kw)

                if backend == "triton":
                    def wrapper():
                        return eg.epilogue_gemm(a, w, epilogue=epilogue, bias=bias, residual=res, scale=scale)
                else:
                    def wrapper():
                        return qg.epilogue_gemm(a, w, epilogue=epilogue, bias=bias, residual=res, scale=scale)
                op()  # tunes and compiles
                gpu = graph_ms(op)
                times = [host_ms(fn) * 1e3 for fn in (op, body, wrapper)]
                launch = "–"
                config = eg.tuned_for(M, N, K, a.dtype, False, epilogue) if backend == "triton" else None
                if config is not None:
                    launch = f"{host_ms(lambda: eg.epilogue_gemm(a, w, epilogue=epilogue, bias=bias, residual=res, scale=scale, config=config)) * 1e3:.0f}"  # noqa: E501
                print(f"| {shape} | {name} | {backend} | {gpu:.4f} | {times[0]:.0f} | {times[1]:.0f} | "
                      f"{times[2]:.0f} | {launch} |", flush=True)
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.calls):
                    op()
                prof.disable()
                torch.cuda.synchronize()
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
                profiles.append(f"\n### {shape} {name} on {backend}: {args.calls} op calls\n{out.getvalue()}")
    print("".join(profiles))


if __name__ == "__main__":
    main()
