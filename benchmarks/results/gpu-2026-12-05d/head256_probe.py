"""Forty-third session: where the per-head epilogue's time goes at head_dim 256 (and 128 for comparison).

Each shape, each of two block configs, the same kernel with pieces added (plain GEMM, + the per-head norm, + RoPE)
and variants of where RoPE's cos/sin tiles come from, built from this checkout's epilogue_gemm.py by text patches
into probe modules (the shipped kernel unchanged): ``const`` (no table read over halves: a timing bound only, its output wrong),
``early`` (pointer loads issued before the k-loop), ``tma`` (descriptor loads after the k-loop), ``tma_early``
(these three as written for the call_a kernel, whose tables were [M, head_dim] at every rope_dim).
Each variant's output against the shipped kernel's (max |Δ| / max |out|). GPU ms by CUDA-graph replay, interleaved
over the rounds, against cuBLAS."""
import importlib.util
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

from norm_fusion_inductor.kernels import epilogue_gemm as eg
from norm_fusion_inductor.timing import graph_ms, interleaved_medians

SRC = open(eg.__file__).read()
LOADS = ("        cos = tl.load(cos_ptr + rows, mask=inside, other=0.0).to(tl.float32)\n"
         "        sin = tl.load(sin_ptr + rows, mask=inside, other=0.0).to(tl.float32)\n")
CALL = "acc = _head_norm(acc, head_weight_ptr, cos_ptr, sin_ptr, eps,"
ZEROS = "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
AFTER = "        offs_m = off_m + tl.arange(0, BLOCK_M)\n"
START = "    start_pid = tl.program_id(0)\n"
PTR_TILES = """        cos_tile = cos_ptr
        sin_tile = sin_ptr
        if ROPE:
            t_m = off_m + tl.arange(0, BLOCK_M)
            t_rows = t_m[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
            cos_tile = tl.load(cos_ptr + t_rows, mask=(t_m < M)[:, None], other=0.0)
            sin_tile = tl.load(sin_ptr + t_rows, mask=(t_m < M)[:, None], other=0.0)
"""
TMA_DESCS = """    if ROPE:
        cos_desc = tl.make_tensor_descriptor(cos_ptr, shape=[M, HEAD_DIM], strides=[HEAD_DIM, 1],
                                             block_shape=[BLOCK_M, HEAD_DIM])
        sin_desc = tl.make_tensor_descriptor(sin_ptr, shape=[M, HEAD_DIM], strides=[HEAD_DIM, 1],
                                             block_shape=[BLOCK_M, HEAD_DIM])
"""
TMA_TILES = """        cos_tile = cos_ptr
        sin_tile = sin_ptr
        if ROPE:
            cos_tile = cos_desc.load([off_m, 0])
            sin_tile = sin_desc.load([off_m, 0])
"""


def patched(tiles_at: str, tiles: str, descs: str = "") -> str:
    s = SRC.replace(LOADS, "        cos = cos_ptr.to(tl.float32)\n        sin = sin_ptr.to(tl.float32)\n")
    s = s.replace(CALL, "acc = _head_norm(acc, head_weight_ptr, cos_tile, sin_tile, eps,")
    s = s.replace(tiles_at, tiles + tiles_at)
    return s.replace(START, descs + START) if descs else s


VARIANTS = {
    # the kernel before this session's change (tables [M, head_dim] padded with cos 1, sin 0 past rope_dim), where
    # its source was put beside this script for the call (not committed)
    "before": (open(BEFORE).read() if os.path.exists(BEFORE := os.path.join(os.path.dirname(__file__),
                                                                             "_before_epilogue_gemm.py")) else ""),
    "const": SRC.replace("tl.load(cos_ptr + rows, mask=inside, other=0.0)", "tl.full((BLOCK_M, R // 2), 0.6, tl.float32)")
    .replace("tl.load(sin_ptr + rows, mask=inside, other=0.0)", "tl.full((BLOCK_M, R // 2), 0.8, tl.float32)")
    .replace("tl.load(cos_ptr + rows + R // 2, mask=inside, other=0.0)", "tl.full((BLOCK_M, R // 2), 0.6, tl.float32)")
    .replace("tl.load(sin_ptr + rows + R // 2, mask=inside, other=0.0)", "tl.full((BLOCK_M, R // 2), 0.8, tl.float32)"),
    "early": patched(ZEROS, PTR_TILES),
    "tma": patched(AFTER, TMA_TILES, TMA_DESCS),
    "tma_early": patched(ZEROS, TMA_TILES, TMA_DESCS),
}


def load_variant(name: str, src: str):
    assert src != SRC, name
    path = os.path.join(tempfile.mkdtemp(), f"_probe_{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"norm_fusion_inductor.kernels._probe_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


SHAPES = [  # M, K, N, head_dim, rope_dim, gates: Qwen3-Next's gated q, Gemma 3 4B's q, Qwen3-8B's q
    (16384, 2048, 8192, 256, 64, True), (8192, 2560, 2048, 256, 0, False), (16384, 4096, 4096, 128, 0, False)]


def config(label: str) -> dict:
    """"128x256x64 s3" (8 warps, one CTA per SM), " flat": the flattened persistent loop."""
    bm, bn, bk = (int(v) for v in label.split()[0].split("x"))
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_stages=int(label.split()[1][1:]), num_warps=8,
                FLATTEN=label.endswith(" flat"), WARP_SPECIALIZE=False, CTAS_PER_SM=1)


# argv: the block configs ("128x256x64 s3 flat", ...); env PIECES / VARIANTS: which to time (all by default)
CONFIGS = {c: config(c) for c in (sys.argv[1:] or ["128x256x64 s3", "64x256x64 s4"])}


def main():
    wanted = os.environ.get("VARIANTS", "shipped," + ",".join(VARIANTS)).split(",")
    mods = {"shipped": eg} | {n: load_variant(n, s) for n, s in VARIANTS.items() if n in wanted and s}
    only_pieces = os.environ.get("PIECES", "plain,norm,rope").split(",")
    rounds = int(os.environ.get("ROUNDS", 5))
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    for M, K, N, D, R, gates in SHAPES:
        torch.manual_seed(0)
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
        scale = torch.rand(M, device="cuda") + 0.5
        angle = torch.rand(M, R or D, device="cuda") * 6.28  # the tables' width: the rotated dims
        cos, sin = angle.cos().bfloat16(), angle.sin().bfloat16()
        weight = torch.rand(D, device="cuda", dtype=torch.bfloat16) + 0.5
        fns, outs = {"cublas": lambda: torch.mm(a, w.t())}, {}
        for cname, cfg in CONFIGS.items():
            pieces = {"plain": (eg.Epilogue(row_norm="rms"), None),
                      "norm": (eg.Epilogue(row_norm="rms", head_dim=D, head_gates=gates), eg.HeadNorm(weight, 1e-6)),
                      "rope": (eg.Epilogue(row_norm="rms", head_dim=D, rope=True, head_norm=False, rope_dim=R,
                                           head_gates=gates), eg.HeadNorm(None, 1e-6, cos, sin))}
            full = (eg.Epilogue(row_norm="rms", head_dim=D, rope=True, rope_dim=R, head_gates=gates),
                    eg.HeadNorm(weight, 1e-6, cos, sin))
            padded = (full[0], eg.HeadNorm(weight, 1e-6, *(F.pad(t, (0, D - (R or D)), value=v)
                                                             for t, v in ((cos, 1.0), (sin, 0.0)))))
            runs = {(p, eg): e for p, e in pieces.items() if p in only_pieces} | {
                (f"norm+rope {m}", mod): padded if m == "before" else full for m, mod in mods.items()}
            for (label, mod), (epilogue, head_norm) in runs.items():
                out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)

                def fn(mod=mod, epilogue=epilogue, head_norm=head_norm, out=out):
                    mod.launch(cfg, a, w, out, epilogue=epilogue, scale=scale, head_norm=head_norm)
                try:
                    fn()
                    torch.cuda.synchronize()
                except Exception as e:
                    print(f"  {cname} {label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                fns[f"{cname} {label}"], outs[f"{cname} {label}"] = fn, out
        ref = next((o for k, o in outs.items() if k.endswith("norm+rope shipped")), None)
        for k, o in outs.items():
            if "norm+rope" in k and ref is not None:
                d = ((o.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                print(f"  {k}: max|d|/max|ref| {d:.1e}{' (a timing bound, wrong by design)' if 'const' in k else ''}")
        t = interleaved_medians(fns, rounds, graph_ms)
        print(f"\n{M}x{K}x{N} head_dim {D}{f' rope_dim {R}' if R else ''}{' gates' if gates else ''}: ms (x cuBLAS)",
              flush=True)
        for k, ms in t.items():
            print(f"  {k:40s} {ms:.4f} ({ms / t['cublas']:.3f})", flush=True)
        fns.clear(), outs.clear()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
