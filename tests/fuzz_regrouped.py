"""Randomized checks of the regrouped-normalization GEMM (``norm_fusion::epilogue_gemm``) against float64.

Each case draws an epilogue (consumer: RMSNorm or LayerNorm row norm with an activation or a gated pair, with or
without the stored pre-activation; producer: bias, residual (optionally normalized on load) and RMSNorm or LayerNorm partial statistics,
the stream's mean up to 1000 σ; per_head: a q/k projection with a per-head RMSNorm (QK-norm) or RoPE alone, with or without the
input's row norm, a bias, RoPE over the head's halves, neighbouring pairs or the halves of its first quarter or half,
each head's output gate after it at times, and the stored projection output), shapes that are not multiples of the tiles (M from 1, odd K and N), fp16/bf16/fp32,
a weight stored [N, K] or [K, N], and operands that are contiguous, row-sliced (a wider row stride) or transposed.
Every case must either run the kernel within tolerance or take the op's torch fallback, also within tolerance,
for a reason the kernel's check names (``epilogue_gemm.unsupported_reason``).

    python tests/fuzz_regrouped.py --cases 4000 --workers 12 --time-limit 470   # on the GPU: one device call
    python tests/fuzz_regrouped.py --cases 20 --max-m 64   # CPU (TRITON_INTERPRET=1)
    python tests/fuzz_regrouped.py --cases 100 --backend quack   # the Quack backend (JIT per new shape: seconds)
    python tests/fuzz_regrouped.py --cases 1000 --workers 6       # the same cases in six processes (compiles in parallel)

On the GPU each case runs one block config drawn with it (every config gets exercised, and one compile per case
instead of the tuner's eight); the cost is Triton's compile of each new specialization, hence the workers. The
float64 reference is computed a block of ``REFERENCE_ROWS`` rows at a time, so a case at M = 300k needs no more
than its own operands and ~1 GB besides.

``tests/test_regrouped.py`` runs a few CPU cases of it in the normal suite.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import random
import sys
import time

import torch
import torch.nn.functional as F

from norm_fusion_inductor import regrouped
from norm_fusion_inductor.kernels import epilogue_gemm as eg

FAMILIES = ("consumer", "producer", "per_head")


def _operand(rng: random.Random, rows: int, cols: int, device, dtype, layout: str) -> torch.Tensor:
    if layout == "transposed":
        return torch.randn(cols, rows, device=device, dtype=dtype).t()
    if layout == "sliced":
        return torch.randn(rows, cols + rng.choice([1, 8, 64]), device=device, dtype=dtype)[:, :cols]
    return torch.randn(rows, cols, device=device, dtype=dtype)


def random_case(rng: random.Random, device: str, max_m: int) -> dict:
    dtypes = [torch.float16, torch.bfloat16, torch.float32] if device == "cuda" else [torch.float32, torch.float16]
    family = rng.choice(FAMILIES)
    if family == "consumer":
        activation = rng.choice(eg.ACTIVATIONS + eg.GATED)
        epilogue = eg.Epilogue(row_norm=rng.choice(["rms", "ln"]), bias=rng.random() < 0.5, activation=activation,
                               write_aux=activation not in eg.GATED and activation != "none" and rng.random() < 0.5)
    elif family == "producer":
        epilogue = eg.Epilogue(bias=True, residual=True, stats=rng.choice(["rms", "ln"]),
                               residual_norm=rng.choice(["none", "rms", "ln"]))
    else:
        rope = rng.random() < 0.7
        head_dim = rng.choice([16, 32, 64, 128, 256] if device == "cuda" else [8, 16])
        # RoPE's pairs: the head's halves, neighbouring columns, or the halves of its first quarter or half (partial)
        form = rng.choice(["halves", "halves", "interleaved", "partial"]) if rope else "halves"
        epilogue = eg.Epilogue(row_norm=rng.choice(["rms", "rms", "ln", "none"]), bias=rng.random() < 0.3,
                               write_aux=rng.random() < 0.5, head_dim=head_dim, rope=rope,
                               head_norm=not rope or rng.random() < 0.7,  # else RoPE alone
                               rope_interleaved=form == "interleaved",
                               rope_dim=head_dim // rng.choice([2, 4]) if form == "partial" else 0,
                               head_gates=rng.random() < 0.2)  # Qwen3-Next's q: each head's output gate after it
    sizes = [1, 8, 16, 40, 64, 200] if device != "cuda" else [1, 8, 64, 520, 1000, 1024, 4097]
    M = rng.choice([1, 3, rng.randint(1, max_m), max_m])
    K, N = rng.choice(sizes[1:]), rng.choice(sizes[1:])
    if epilogue.gated:
        N += N % 2
    if epilogue.head_dim:  # whole heads (and with gates, whole (head, gate) pairs)
        N = epilogue.head_dim * rng.randint(1, 16 if device == "cuda" else 3) * (2 if epilogue.head_gates else 1)
    return dict(family=family, epilogue=epilogue, M=M, K=K, N=N, dtype=rng.choice(dtypes),
                w_kn=rng.random() < 0.3, layout_a=rng.choice(["contiguous", "contiguous", "sliced", "transposed"]),
                layout_r=rng.choice(["contiguous", "sliced"]), shift=rng.choice([0.0, 0.0, 100.0, 1000.0]))


def reference64(a, w, epilogue, w_kn, bias=None, residual=None, scale=None, shift=None, u=None, res_norm=None,
                head=None):
    """(out, z) of the epilogue GEMM in float64, written from the module doc of kernels/epilogue_gemm.py.
    ``head``: (weight, eps, cos, sin) of a per-head norm (cos, sin None without RoPE; with ``rope_dim`` the first
    rope_dim dims rotated by the tables' first rope_dim columns, the rest passed through)."""
    acc = a.double() @ (w.double() if w_kn else w.double().t())
    if epilogue.row_norm != "none":
        acc = acc * scale.double()[:, None]
    if epilogue.row_norm == "ln":
        acc = acc - shift.double()[:, None] * u.double()[None, :]
    if bias is not None:
        acc = acc + bias.double()
    if residual is not None:
        r = residual.double()
        if res_norm is not None:
            r = r * res_norm.scale.double()[:, None]
            if res_norm.shift is not None:
                r = r - res_norm.shift.double()[:, None]
            if res_norm.weight is not None:
                r = r * res_norm.weight.double()
            if res_norm.bias is not None:
                r = r + res_norm.bias.double()
        acc = acc + r
    if epilogue.head_dim:
        weight, eps, cos, sin = head
        D = epilogue.head_dim
        z = acc.view(acc.shape[0], -1, D)
        if epilogue.head_gates:  # the even heads; the odd ones (their output gates) as projected
            z = z[:, 0::2]
        if weight is not None:  # else RoPE alone
            if epilogue.head_center:  # LayerNorm
                z = z - z.mean(-1, keepdim=True)
            z = z * torch.rsqrt(z.square().mean(-1, keepdim=True) + eps) * weight.double()
        if cos is not None:
            R = epilogue.rope_dim or D
            z_rot, z_pass = z[..., :R], z[..., R:]
            if epilogue.rope_interleaved:
                rotated = torch.stack([-z_rot[..., 1::2], z_rot[..., 0::2]], -1).flatten(-2)
            else:
                rotated = torch.cat([-z_rot[..., R // 2:], z_rot[..., :R // 2]], -1)
            z_rot = z_rot * cos.double()[:, None, :R] + rotated * sin.double()[:, None, :R]
            z = torch.cat([z_rot, z_pass], -1)
        if epilogue.head_gates:
            z = torch.stack([z, acc.view(acc.shape[0], -1, D)[:, 1::2]], 2)
        return z.reshape(acc.shape), acc
    acts = {"none": lambda z: z, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
            "silu": F.silu, "relu2": lambda z: F.relu(z) ** 2}
    if epilogue.gated:
        return acts[epilogue.activation[:-len("_mul")]](acc[:, 0::2]) * acc[:, 1::2], acc
    return acts[epilogue.activation](acc), acc


REFERENCE_ROWS = 16384  # rows per float64 reference block (~1 GB at K = N = 4097)


def _rows(t, rows: slice):
    return t[rows] if t is not None else None


def _add_errors(sums: collections.Counter, name: str, got, ref) -> None:
    sums[f"{name}_err"] += (got.double() - ref.double()).square().sum().item()
    sums[f"{name}_ref"] += ref.double().square().sum().item()


def _summed_rel(sums: collections.Counter, name: str) -> float:
    """‖got − ref‖ / ‖ref‖ over every row block (‖got − ref‖ where ref is 0)."""
    err, ref = math.sqrt(sums[f"{name}_err"]), math.sqrt(sums[f"{name}_ref"])
    return err / ref if ref > 0 else err


def check_case(case: dict, device: str, backend: str = "triton") -> tuple[str, str]:
    """("kernel" | "fallback", detail); raises AssertionError on a wrong result. ``backend``: the op's GEMM
    backend (a case Quack does not take runs on the Triton kernel, as in the op)."""
    e, M, K, N, dt = case["epilogue"], case["M"], case["K"], case["N"], case["dtype"]
    rng = random.Random(hash((M, K, N)))
    a = _operand(rng, M, K, device, dt, case["layout_a"])
    w = (torch.randn(K, N, device=device, dtype=dt) if case["w_kn"] else torch.randn(N, K, device=device, dtype=dt))
    w = w / K ** 0.5
    # the stream's mean far from 0 (LayerNorm's cancellation case) on the producer, whose statistics it tests
    bias = torch.randn(N, device=device) + (case["shift"] if e.stats != "none" else 0.0) if e.bias else None
    residual = _operand(rng, M, N, device, dt, case["layout_r"]) if e.residual else None
    scale = torch.rand(M, device=device) + 0.5 if e.row_norm != "none" else None
    shift = torch.randn(M, device=device) if e.row_norm == "ln" else None
    u = torch.randn(N, device=device) if e.row_norm == "ln" else None
    res_norm = None
    if e.residual_norm != "none":
        res_norm = eg.ResidualNorm(torch.rand(M, device=device) + 0.5,
                                   torch.randn(M, device=device) if e.residual_norm == "ln" else None,
                                   torch.rand(N, device=device) + 0.5 if rng.random() < 0.8 else None,
                                   torch.randn(N, device=device) if e.residual_norm == "ln" else None)
    head, head_args = None, {}
    if e.head_dim:  # the per-head norm's weight and eps, the rotary tables of random positions
        D = e.head_dim
        # a per-head LayerNorm (Cohere's) and a weight per head, drawn here from the case's own generator (the
        # run's draws, and so earlier seeds' cases, unchanged)
        if e.head_norm and rng.random() < 0.3:
            e = case["epilogue"] = dataclasses.replace(e, head_center=True)
        weight_shape = ((N // D // (2 if e.head_gates else 1), D) if rng.random() < 0.3 else (D,))
        weight = (torch.rand(weight_shape, device=device) + 0.5).to(dt) if e.head_norm else None
        cos = sin = None
        if e.rope:  # tables of the rotated width R
            R = e.rope_dim or D
            positions = torch.randint(0, 4096, (M,), generator=torch.Generator().manual_seed(M)).double()
            angles = positions[:, None] / (10000 ** (torch.arange(0, R, 2, dtype=torch.float64) / R))[None, :]
            angles = angles.repeat_interleave(2, -1) if e.rope_interleaved else torch.cat([angles, angles], -1)
            cos, sin = angles.cos().to(device, dt), angles.sin().to(device, dt)
        head = (weight, 1e-6, cos, sin)
        head_args = dict(head_dim=D, head_weight=weight, head_eps=1e-6, rope_cos=cos, rope_sin=sin,
                         rope_interleaved=e.rope_interleaved, rope_dim=e.rope_dim, head_gates=e.head_gates,
                         head_center=e.head_center)
        if rng.random() < 0.3:  # eps as dynamic shapes pass it: a 0-d fp64 graph input on the host
            head_args.update(head_eps=0.0, head_eps_tensor=torch.tensor(1e-6, dtype=torch.float64))
    reason = regrouped.prepare(a, w, residual, case["w_kn"], e)[3]  # what the op will do
    out, aux, partials = regrouped.epilogue_gemm(a, w, bias, residual, scale, shift, u, e.row_norm, e.activation,
                                                 e.write_aux, e.stats, case["w_kn"], e.residual_norm,
                                                 *((res_norm.scale, res_norm.shift, res_norm.weight, res_norm.bias)
                                                   if res_norm else (None,) * 4), backend=backend, **head_args)
    tol = 1e-4 if dt == torch.float32 else 2e-2
    assert torch.isfinite(out).all(), f"non-finite output in {case}"
    rstd = mean = None
    if e.stats != "none":
        rstd, mean = regrouped.finish_stats(partials, N, 1e-5, e.stats)
    sums = collections.Counter()  # squared errors and squared references, summed over the row blocks
    for lo in range(0, M, REFERENCE_ROWS):  # float64 a block of rows at a time: bounded memory at any M
        rows = slice(lo, min(lo + REFERENCE_ROWS, M))
        block_norm = None if res_norm is None else eg.ResidualNorm(
            res_norm.scale[rows], _rows(res_norm.shift, rows), res_norm.weight, res_norm.bias)
        block_head = None if head is None else (head[0], head[1], _rows(head[2], rows), _rows(head[3], rows))
        ref, z = reference64(a[rows], w, e, case["w_kn"], bias, _rows(residual, rows), _rows(scale, rows),
                             _rows(shift, rows), u, block_norm, block_head)
        _add_errors(sums, "output", out[rows], ref)
        if e.write_aux:
            _add_errors(sums, "aux", aux[rows], z)
        if e.stats != "none":
            zs = out[rows].double()  # the statistics are of z as stored
            var = zs.var(-1, unbiased=False) if e.stats == "ln" else zs.square().mean(-1)
            _add_errors(sums, "rstd", rstd[rows], torch.rsqrt(var + 1e-5))
            if mean is not None:
                _add_errors(sums, "mean", mean[rows], zs.mean(-1))
    err = _summed_rel(sums, "output")
    for name, limit in (("output", tol), ("aux", tol), ("rstd", 1e-3), ("mean", 1e-4)):
        if f"{name}_ref" in sums:
            got = _summed_rel(sums, name)
            assert got < limit, f"{name} error {got:.2e} (tol {limit}) in {case}"
    return ("kernel", f"err {err:.1e}") if reason is None else ("fallback", reason)


def first_running_config(configs: list, run, draw: int, what: str) -> dict:
    """The config at index ``draw`` (mod their number), or the next one that runs: like the tuner, it passes over a
    config that does not compile or fit in shared memory."""
    first = draw % len(configs)
    errors = []
    for cfg in configs[first:] + configs[:first]:
        try:
            run(cfg)
            return cfg
        except Exception as e:  # triton's OutOfResources, a compile error: what the tuner skips
            errors.append(f"{type(e).__name__}: {str(e)[:120]}")
    raise RuntimeError(f"no config runs for {what}: {errors}")


def _drawn_config(case: dict):
    """A tuned_config stand-in: one of the configs the tuner would time, drawn from the case."""
    def pick(a, w, w_kn, epilogue, run):  # the candidates as tuned_config offers them (N sizes a post-norm's)
        return first_running_config(eg._configs(a, epilogue, w.shape[1 if w_kn else 0]), run, case["config"],
                                    str(epilogue))
    return pick


def run(cases: int, seed: int, device: str, max_m: int, backend: str = "triton", progress: int = 0,
        shard: int = 0, shards: int = 1, time_limit: float | None = None) -> dict:
    """{family: Counter of outcomes}; raises on the first wrong result. ``progress``: print a line every that many
    cases (a run cut short by a timeout still says how far it got). ``shard`` of ``shards``: run every
    ``shards``-th case of the same sequence. ``time_limit``: seconds after which no new case starts (the summary
    then counts the cases run)."""
    deadline = time.monotonic() + time_limit if time_limit else None
    rng = random.Random(seed)
    summary = {f: collections.Counter() for f in FAMILIES}
    tuned_config = eg.tuned_config
    for i in range(cases):
        case = random_case(rng, device, max_m)
        case["config"] = rng.randrange(64)
        if i % shards != shard:
            continue
        if deadline is not None and time.monotonic() > deadline:
            print(f"time limit: stopped before case {i}", flush=True)
            break
        eg.tuned_config = _drawn_config(case)
        try:
            path, detail = check_case(case, device, backend)
        except torch.OutOfMemoryError:  # the float64 reference of a large case, in this worker's memory share
            path, detail = "skipped", "out of memory (this worker's share of the GPU)"
            torch.cuda.empty_cache()
        finally:
            eg.tuned_config = tuned_config
        summary[case["family"]][path if path == "kernel" else f"{path}: {detail.split(' (')[0]}"] += 1
        if progress and (i + 1) % progress == 0:
            print(f"{i + 1} cases, 0 wrong", flush=True)
    return summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--max-m", type=int, default=300_000)
    p.add_argument("--backend", default="triton", choices=["triton", "quack"])
    add_run_arguments(p)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.workers > 1:
        argv = ["--cases", str(args.cases), "--seed", str(args.seed), "--max-m", str(args.max_m), "--backend",
                args.backend] + (["--time-limit", str(args.time_limit)] if args.time_limit else [])
        return run_workers(__file__, argv, args.workers, FAMILIES)
    limit_worker_memory(args.shards)
    summary = run(args.cases, args.seed, device, args.max_m, args.backend, progress=50 // args.shards or 1,
                  shard=args.shard, shards=args.shards, time_limit=args.time_limit)
    return report(summary, args.summary_json)


# GPU memory a worker holds outside PyTorch's allocator (the CUDA context, loaded kernels and their local-memory
# reservation): 10.5–14.8 GB per process against an 11.4 GB allocator cap (H200, 11 workers, 2026-12-03)
OUTSIDE_ALLOCATOR_BYTES = 3.5 * 2**30


def limit_worker_memory(shards: int) -> None:
    """A worker's allocator capped at its share of the GPU less what it holds outside the allocator, so that one
    large case is skipped (out of memory, counted) instead of starving the other workers."""
    if shards > 1 and torch.cuda.is_available():
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(max(0.9 / shards - OUTSIDE_ALLOCATOR_BYTES / total, 0.01))


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options both fuzzers take: the seed, the workers, the call's time limit, and a worker's own."""
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="processes that share the cases")
    p.add_argument("--time-limit", type=float, help="seconds after which no new case starts; the summary counts "
                                                     "the cases run (a device call's limit)")
    p.add_argument("--shard", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--shards", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--summary-json", help=argparse.SUPPRESS)


def report(summary: dict, summary_json: str | None) -> int:
    """A worker writes its summary for run_workers to read back; a single process prints it."""
    if summary_json:
        with open(summary_json, "w") as f:
            json.dump({family: dict(c) for family, c in summary.items()}, f)
    else:
        print_summary(summary)
    return 0


def run_workers(script: str, argv: list, workers: int, families) -> int:
    """``script argv`` split over ``workers`` processes (``--shards``, ``--shard``, ``--summary-json``), their
    output (progress, a failure's traceback) printed as it comes, their summaries merged; the summary says how
    many workers stopped on a failure."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        paths = [f"{tmp}/worker{i}.json" for i in range(workers)]
        base = [sys.executable, script, *argv, "--shards", str(workers)]
        procs = [subprocess.Popen(base + ["--shard", str(i), "--summary-json", path]) for i, path in enumerate(paths)]
        failed = sum(proc.wait() != 0 for proc in procs)
        summary = {f: collections.Counter() for f in families}
        for path in paths:
            try:
                with open(path) as f:
                    for family, counts in json.load(f).items():
                        summary[family].update(counts)
            except FileNotFoundError:  # that worker failed before its summary
                pass
    print_summary(summary, failed)
    return 1 if failed else 0


def print_summary(summary: dict, failed_workers: int = 0) -> None:
    """Per family: the cases (a "cases" count where the outcomes are not one per case), then each outcome."""
    if failed_workers:
        print(f"{failed_workers} worker(s) stopped on a failure (above); the counts are of the cases run before")
    for family, counts in summary.items():
        cases = counts["cases"] if "cases" in counts else sum(counts.values())
        print(f"{family}: {cases} cases{'' if failed_workers else ', 0 wrong'}")
        for outcome, n in counts.most_common():
            if outcome != "cases":
                print(f"  {n:5d}  {outcome}")


if __name__ == "__main__":
    sys.exit(main())
