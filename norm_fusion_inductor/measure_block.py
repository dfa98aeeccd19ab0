"""A site's unfused subgraph compiled by torch.compile (default mode) against the fused version, timed side by
side at the site's shape, in a child process: what the selection runs when its lower bound cannot decide.

Attention sites (the default; selection.choose_attention): the norm → attention → norm block compiled, against
the fused op. A lower bound of the unfused block (its attention alone plus copies of q) is all the selection can
time inside a compilation, and in training it bounds nothing: its attention term runs eager autograd and can read
slower than the whole compiled block (docs/decisions.md#selectionchoose_attention).

Matmul sites ("kind": "matmul"; selection._compiled_check): the norm and the linear as the model computes them
(``matmul_block``), compiled by torch.compile and by this plugin with policy "always" (the fused graph the site
would get). The bound counts the norm as a copy; Inductor's norm kernels can be slower than that, so a fused
kernel that beats the bound by less than min_speedup may still win against the real graph.

The compiled alternative is the honest one, but torch.compile cannot run inside the compilation that asks
(Dynamo holds its compile lock), hence the child process:

    python -m norm_fusion_inductor.measure_block '{"batch": 768, "q_len": 512, ...}'   # prints one JSON line

Inputs: the site's fields (sites.AttentionSite or sites.PostNormSite) as JSON, dtype and device as strings,
the parent's TF32 setting (allow_tf32), max-autotune flag (max_autotune) and, for matmul sites, its choice cache
(cache_dir) and launch option (launch). Output: fused_ms and compiled_ms, medians of three interleaved rounds of
do_bench (forward, or forward + backward when "train"), the order reversed every other round. Exits non-zero when
the fused version would not run the fused kernels here (a reference path must never be timed as "fused").
"""

from __future__ import annotations

import dataclasses
import json
import sys

import torch
import torch.nn.functional as F

from .timing import interleaved_medians

EPS = 1e-6


def _setup(site: dict) -> tuple:
    dev, dt = torch.device(site["device"]), getattr(torch, site["dtype"].replace("torch.", ""))
    torch.cuda.set_device(dev)  # Triton launches and do_bench time on the current device
    torch.backends.cuda.matmul.allow_tf32 = site.get("allow_tf32", False)
    return dev, dt


def _time(fns: dict) -> dict:
    """Medians of three interleaved rounds (timing.interleaved_medians), after a warm-up call of each."""
    from triton.testing import do_bench

    for f in fns.values():  # compile and warm up outside the timing
        f()
    torch.cuda.synchronize()
    return interleaved_medians(fns, 3, lambda f: do_bench(f, warmup=5, rep=30, return_mode="median"))


def measure_attention(site: dict) -> dict:
    from .attention_ops import _kernel_reason, flash_norm_attention, norm_attention_block

    dev, dt = _setup(site)
    B, L, Lk, H, D = (site[k] for k in ("batch", "q_len", "kv_len", "heads", "head_dim"))
    train, act = site["train"], site["activation"]
    q = torch.randn(B, L, H * D, device=dev, dtype=dt, requires_grad=train)
    kv_grad = train and site.get("kv_grad", True)  # as the site's k and v: without, neither computes dK/dV
    k, v = (torch.randn(B, Lk, H * D, device=dev, dtype=dt, requires_grad=kv_grad) for _ in range(2))
    reason = _kernel_reason(q.view(B * L, H * D), k, v, H, act)
    if reason is not None:
        raise RuntimeError(f"the fused op would run its reference path here: {reason}")
    weights = [(1 + 0.1 * torch.randn(H * D, device=dev)).to(dt).requires_grad_(train) if site[name] else None
               for name in ("has_ln_weight", "has_ln_bias", "has_rms_weight")]
    scale = D ** -0.5 if act == "softmax" else 1.0 / Lk

    def block(q, k, v, *w):
        return norm_attention_block(q, k, v, H, *w, scale, act)

    # the mode the asking compilation runs in (its max-autotune flag): that is the block the site would get
    compiled = torch.compile(block, dynamic=False, mode="max-autotune-no-cudagraphs" if site.get("max_autotune")
                             else None)
    fns = {"fused_ms": lambda: flash_norm_attention(q, k, v, H, *weights, scale=scale, activation=act),
           "compiled_ms": lambda: compiled(q, k, v, *weights)}
    if train:
        leaves = [t for t in (q, k, v, *weights) if t is not None and t.requires_grad]
        grad = torch.randn_like(q)
        fns = {name: (lambda f=f: torch.autograd.grad(f(), leaves, grad)) for name, f in fns.items()}
    return _time(fns)


def matmul_block(site):
    """What a model computes at a post-norm site (sites.PostNormSite), unfused, as a function of the operands
    sites.post_norm_operands makes: norm(linear(x) + residual) (+ residual_out), and z = linear(x) + residual as
    a second output when the site writes it. GPT-2's Conv1D
    (weight stored [K, N]) is addmm(b, x, W)."""
    ln = site.norm == "ln"

    def norm(t, g, beta):
        return F.layer_norm(t, t.shape[-1:], g, beta, EPS) if ln else F.rms_norm(t, t.shape[-1:], g, EPS)

    def linear(x, w, b):
        if site.weight_kn:
            return torch.addmm(b, x, w) if b is not None else x @ w
        return F.linear(x, w, b)

    def post(x, w, g, beta, b, residual, residual_out):
        z = linear(x, w, b)
        if residual is not None:
            z = z + residual
        y = norm(z, g, beta)
        if residual_out is not None:
            y = y + residual_out
        return (y, z) if site.write_z else y

    return post


def matmul_site(fields: dict):
    """The sites.PostNormSite the fields describe (dtype and device as strings, other keys ignored)."""
    from .sites import PostNormSite

    names = {f.name for f in dataclasses.fields(PostNormSite)} - {"dtype", "device"}
    dtype = getattr(torch, fields["dtype"].replace("torch.", ""))
    return PostNormSite(**{k: v for k, v in fields.items() if k in names}, dtype=dtype,
                      device=torch.device(fields["device"]))


def measure_matmul(fields: dict) -> dict:
    import norm_fusion_inductor as nfi

    from .sites import post_norm_operands

    _setup(fields)
    site = matmul_site(fields)
    t = post_norm_operands(site)
    args = tuple(t.get(k) for k in ("x", "w", "g", "beta", "b", "residual", "residual_out"))
    block = matmul_block(site)
    patches = {"max_autotune": True} if fields.get("max_autotune") else {}  # the asking compilation's mode
    compiled = torch.compile(block, dynamic=False, options=dict(patches) or None)
    # the post-norm family the asking selection decides for alone
    fused = torch.compile(block, dynamic=False, backend="norm_fusion", options={**patches, "norm_fusion": {
        "policy": "always", "cache_dir": fields.get("cache_dir"), "launch": fields.get("launch", "direct"),
        "fusions": ("matmul_norm",)}})
    nfi.clear_reports()
    fused(*args)
    records = nfi.reports()
    if not any(r.rewritten and (r.implementation or "").startswith("fused_triton") for r in records):
        raise RuntimeError("the plugin did not fuse the site here: "
                           + ("; ".join(f"{r.fusion}: {r.implementation}: {r.reason}" for r in records) or "no site"))
    return _time({"fused_ms": lambda: fused(*args), "compiled_ms": lambda: compiled(*args)})


def measure(site: dict) -> dict:
    return {"matmul": measure_matmul}.get(site.get("kind"), measure_attention)(site)


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
