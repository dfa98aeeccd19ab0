"""Randomized models through ``torch.compile(backend="norm_fusion")`` against eager and float64.

Each case builds a small random model from the structures the rewrites look for, stacked one to three deep: pre-norm
blocks (a norm feeding one projection with an activation, a gated pair as Llama's MLP, three projections summed, or
causal attention with or without a per-head QK-norm and RoPE, or NanoChat's weightless QK-norm after RoPE, its q
projection at times with each head's output gate (Qwen3-Next's), back into the residual stream; a final norm and
head),
post-norm blocks (the stream plus a projection, then the norm, as BERT's output) or both. The norm is drawn from the
forms real models write (nn.LayerNorm with or without its affine parameters, nn.RMSNorm, F.layer_norm, transformers'
Llama, T5 and Gemma RMSNorms, a LayerNorm written out as Cohere's; the QK-norm an RMSNorm or Cohere's per-head
LayerNorm), its eps and weights at random (not ones and
zeros, which hide a missing γ or β). The input is 2-D or 3-D, contiguous, transposed or sliced, with a mean up to
1000 σ; fp32 or fp16 (bf16 too on the GPU); inference or training (a case that plain torch.compile cannot compile
either, as Inductor's CPU code for some fp16 backward graphs, is counted as skipped). Compiled with policy "always"
(every site the rewrites find is fused, whether faster or not; a third of the cases with ``dynamic=True``, called at
two lengths), each case must match float64 within tolerance, or within twice eager's own error where that is larger
(for a quantity ill-conditioned in its dtype, twice what a rounding unit's change of the inputs moves eager's)
— the output and, in training, the input's and every parameter's gradient — and every site the plugin reports must
say why it was or was not rewritten.

    python tests/fuzz_models.py --cases 200 --workers 12 --time-limit 470   # the GPU: one device call
    python tests/fuzz_models.py --cases 4                                     # CPU (TRITON_INTERPRET=1): slow
    python tests/fuzz_models.py --case "{'family': 'pre_norm', ...}"           # one case again, as printed

On the GPU each GEMM the plugin tunes runs one block config drawn with the case (the tuner's memo is filled as
usual, so the sites still launch from Inductor's code), instead of timing eight: a compile per config is the cost.
``tests/test_regrouped.py`` runs two CPU cases in the normal suite.
"""

from __future__ import annotations

import argparse
import collections
import copy
import os
import random
import sys
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():  # Triton reads it when a kernel is defined: before the package is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests` as a package when run as a script

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import norm_fusion_inductor as nfi  # noqa: E402
from norm_fusion_inductor.kernels import epilogue_gemm as eg  # noqa: E402
from norm_fusion_inductor.kernels import tuning  # noqa: E402
from tests.fuzz_regrouped import (  # noqa: E402
    add_run_arguments, first_running_config, limit_worker_memory, report, run_workers)
from tests.helpers import GemmaRMSNorm, LlamaRMSNorm, T5LayerNorm, rel_err  # noqa: E402

FAMILIES = ("pre_norm", "post_norm", "mixed")
# fp32: a regrouped LayerNorm subtracts μ·Σ(W·γ) after its GEMM, whose fp32 sum then carries |μ|/σ times the
# rounding of a centred one: ~1e-7·|μ|/σ measured per norm (1.2e-4 at 1000 σ, where eager's own error is 3.6e-5;
# 3.1e-4 with two LayerNorms in a row on the GPU)
TOL = {torch.float32: 5e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}


class FunctionalLayerNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d)), eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class WrittenLayerNorm(nn.Module):
    """Cohere's LayerNorm: the mean, then the variance of the centred values, in fp32, a weight and no bias."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        mean = x.mean(-1, keepdim=True)
        variance = (x - mean).pow(2).mean(-1, keepdim=True)
        x = (x - mean) * torch.rsqrt(variance + self.eps)
        return (self.weight.to(torch.float32) * x).to(dtype)


NORMS = {
    "layer_norm": lambda d, eps: nn.LayerNorm(d, eps=eps),
    "layer_norm_no_bias": lambda d, eps: nn.LayerNorm(d, eps=eps, bias=False),
    "layer_norm_no_affine": lambda d, eps: nn.LayerNorm(d, eps=eps, elementwise_affine=False),
    "functional_layer_norm": FunctionalLayerNorm,
    "written_layer_norm": WrittenLayerNorm,
    "rms_norm": lambda d, eps: nn.RMSNorm(d, eps=eps),
    "rms_norm_no_affine": lambda d, eps: nn.RMSNorm(d, eps=eps, elementwise_affine=False),
    "llama_rms_norm": lambda d, eps: LlamaRMSNorm(d, eps),
    "t5_layer_norm": lambda d, eps: T5LayerNorm(d, eps),
    "gemma_rms_norm": lambda d, eps: GemmaRMSNorm(d, eps),
}
class _KinkedReLU(torch.autograd.Function):
    """ReLU whose float64 backward can take the other side of the kink for inputs within ``band`` of 0: where the
    16-bit model's rounding may put a pre-activation on either side, its gradient jumps (a whole row of a weight's
    gradient at a tiny M), and the reference must allow both sides."""

    band = 0.0  # set while the flipped reference runs

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return F.relu(z)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        mask = z > 0
        if _KinkedReLU.band:
            mask = mask ^ (z.abs() < _KinkedReLU.band * z.pow(2).mean().sqrt())
        return grad * mask


def _relu(z):
    return _KinkedReLU.apply(z) if z.dtype == torch.float64 else F.relu(z)


ACTIVATIONS = {"none": lambda z: z, "relu": _relu, "silu": F.silu, "gelu": F.gelu,
               "gelu_tanh": lambda z: F.gelu(z, approximate="tanh")}


class PreNormBlock(nn.Module):
    """x + down(mlp(norm(x))): mlp one projection and an activation, a gated pair act(gate(h))·up(h), or the
    sum of three projections (attention's q/k/v, without the attention)."""

    def __init__(self, norm, d, ff, kind, act, bias):
        super().__init__()
        self.norm, self.kind, self.act = norm, kind, ACTIVATIONS[act]
        self.projections = nn.ModuleList(nn.Linear(d, ff, bias=bias) for _ in range({"plain": 1, "gated": 2,
                                                                                     "qkv": 3}[kind]))
        self.down = nn.Linear(ff, d, bias=bias)

    def forward(self, x):
        h = self.norm(x)
        if self.kind == "gated":
            y = self.act(self.projections[0](h)) * self.projections[1](h)
        elif self.kind == "qkv":
            y = sum(p(h) for p in self.projections)
        else:
            y = self.act(self.projections[0](h))
        return x + self.down(y)


def rotate_half(x, form: str):
    """transformers' rotate-half (slices), the same with chunk (a split in the graph), NanoChat's with the signs
    swapped (``flipped``: the rotation by -θ), or the neighbouring pairs' (``interleaved``: GPT-J's
    rotate_every_two, Cohere's rotate_half). (``complex``, Llama 4's: ``complex_rope``.)"""
    if form == "interleaved":
        return torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
    x1, x2 = x.chunk(2, -1) if form == "chunk" else (x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:])
    return torch.cat((x2, -x1), -1) if form == "flipped" else torch.cat((-x2, x1), -1)


def unit_rms_norm(x, eps):
    """NanoChat's RMSNorm without weight: in fp32, back to the input's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x)


class PreNormAttention(nn.Module):
    """x + o(attention(q, k, v)) of norm(x), causal, with optionally a per-head RMSNorm of q and k (QK-norm, as
    Qwen3's) and rotate-half RoPE on them (``rope``: None or rotate_half's form), after the heads' transpose or,
    ``rope_before_transpose``, before it with the tables unsqueezed at the heads (Gemma 4's); ``qk_norm``
    "after_rope": a per-head RMSNorm without weight after RoPE (NanoChat's), "weighted_after_rope" one with a
    weight (HunYuan's). ``rope_in_fp32``: q and k rotated in fp32 and cast back (Cohere's). ``gated_q``: the q
    projection twice as wide, each head's q and its output gate side by side, chunked apart; the attention's
    output times σ(gate) (Qwen3-Next's and Qwen3.5's). ``qk_layer_norm``: the QK-norm before RoPE a per-head
    LayerNorm without bias, a weight per head (Cohere's, [H, D]). A 2-D input is one sequence."""

    def __init__(self, norm, d, head_dim, qk_norm, rope, bias, eps, rope_before_transpose=False, rope_in_fp32=False,
                 gated_q=False, qk_layer_norm=False):
        super().__init__()
        self.norm, self.heads, self.head_dim, self.rope = norm, d // head_dim, head_dim, rope
        self.rope_before_transpose, self.rope_in_fp32, self.gated_q = rope_before_transpose, rope_in_fp32, gated_q
        self.q, self.k, self.v = (nn.Linear(d, d * (2 if gated_q and i == 0 else 1), bias=bias) for i in range(3))
        self.o = nn.Linear(d, d, bias=bias)
        weighted = qk_norm is True or qk_norm == "weighted_after_rope"
        if qk_layer_norm and qk_norm is True:
            self.q_norm, self.k_norm = (WrittenLayerNorm((self.heads, head_dim), eps) for _ in range(2))
        else:
            self.q_norm = LlamaRMSNorm(head_dim, eps) if weighted else None
            self.k_norm = LlamaRMSNorm(head_dim, eps) if weighted else None
        self.norm_after_rope = qk_norm in ("after_rope", "weighted_after_rope")
        self.eps = eps
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))

    def forward(self, x):
        h = self.norm(x)
        gate = None
        if self.gated_q:
            q, gate = torch.chunk(self.q(h).view(*x.shape[:-1], self.heads, 2 * self.head_dim), 2, dim=-1)
            q, gate = q.view(*x.shape[:-1], self.heads, self.head_dim), gate.reshape(x.shape)
            k, v = (p(h).view(*x.shape[:-1], self.heads, self.head_dim) for p in (self.k, self.v))
        else:
            q, k, v = (p(h).view(*x.shape[:-1], self.heads, self.head_dim) for p in (self.q, self.k, self.v))
        if self.q_norm is not None and not self.norm_after_rope:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope == "complex":  # Llama 4's: before the transpose, its norm too
            angles = torch.arange(x.shape[-2], device=x.device).float()[:, None] * self.inv_freq[None, :]
            freqs = torch.polar(torch.ones_like(angles), angles)
            freqs = freqs[None, :, None, :] if x.dim() == 3 else freqs[:, None, :]
            q, k = complex_rope(q, freqs), complex_rope(k, freqs)
            q, k = self._norm_after_rope(q, k)
        elif self.rope:
            angles = torch.arange(x.shape[-2], device=x.device).float()[:, None] * self.inv_freq[None, :]
            if self.rope in PARTIAL_ROPE:  # the first R dims of each head rotated (their own frequencies)
                rotated = int(self.head_dim * PARTIAL_ROPE[self.rope][1]) // 2 * 2
                angles = angles[:, :rotated // 2] * 2
            interleaved = self.rope in ("interleaved", "partial")
            angles = angles.repeat_interleave(2, -1) if interleaved else torch.cat((angles, angles), -1)
            cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
            if self.rope_before_transpose:  # [1, tokens, 1, head_dim] against [..., tokens, heads, head_dim]
                cos, sin = cos[None].unsqueeze(2), sin[None].unsqueeze(2)
        if self.rope and self.rope != "complex" and self.rope_before_transpose:
            q, k = apply_rope(q, cos, sin, self.rope), apply_rope(k, cos, sin, self.rope)
        q, k, v = (t.transpose(-2, -3) for t in (q, k, v))  # [..., heads, tokens, head_dim]
        if self.rope and self.rope != "complex" and not self.rope_before_transpose:
            dtype = q.dtype
            if self.rope_in_fp32:
                q, k = q.float(), k.float()
            q, k = apply_rope(q, cos, sin, self.rope), apply_rope(k, cos, sin, self.rope)
            q, k = q.to(dtype), k.to(dtype)
        if self.rope != "complex":
            q, k = self._norm_after_rope(q, k)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(-2, -3).reshape(x.shape)
        return x + self.o(o * torch.sigmoid(gate) if gate is not None else o)

    def _norm_after_rope(self, q, k):
        if self.norm_after_rope and self.q_norm is not None:
            return self.q_norm(q), self.k_norm(k)
        if self.norm_after_rope:
            return unit_rms_norm(q, self.eps), unit_rms_norm(k, self.eps)
        return q, k


# form: the rotation of the first dims of each head, and their share of the head (GLM-4's interleaved over half;
# GLM-4.5's rotate-half over half, Qwen3-Next's and GPT-NeoX's over a quarter; 3/8: a width not a power of two)
PARTIAL_ROPE = {"partial": ("interleaved", 0.5), "partial_half": ("slice", 0.5), "partial_quarter": ("slice", 0.25),
                "partial_uneven": ("slice", 0.375)}


def apply_rope(x, cos, sin, form: str):
    """x·cos + rotate(x)·sin; the ``PARTIAL_ROPE`` forms rotate the first dims of each head only, as wide as the
    tables, and pass the rest through."""
    if form in PARTIAL_ROPE:
        x_rot, x_pass = x[..., :cos.shape[-1]], x[..., cos.shape[-1]:]
        return torch.cat((x_rot * cos + rotate_half(x_rot, PARTIAL_ROPE[form][0]) * sin, x_pass), -1)
    return x * cos + rotate_half(x, form) * sin


def complex_rope(x, freqs):
    """Llama 4's RoPE: each pair (x[2i], x[2i+1]) a complex number, times freqs, in fp32, back to x's dtype."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs).flatten(-2).type_as(x)


class PostNormBlock(nn.Module):
    """norm(x + out(act(inner(x)))), as BERT's attention and FFN outputs."""

    def __init__(self, norm, d, ff, act, bias):
        super().__init__()
        self.norm, self.act = norm, ACTIVATIONS[act]
        self.inner, self.out = nn.Linear(d, ff, bias=bias), nn.Linear(ff, d, bias=bias)

    def forward(self, x):
        return self.norm(x + self.out(self.act(self.inner(x))))


class Model(nn.Module):
    def __init__(self, blocks, final_norm, head):
        super().__init__()
        self.blocks, self.final_norm, self.head = nn.ModuleList(blocks), final_norm, head

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x) if self.final_norm is not None else x)


def random_case(rng: random.Random, device: str, max_m: int) -> dict:
    cuda = device == "cuda"
    family = rng.choice(FAMILIES)
    layers = rng.randint(2 if family == "mixed" else 1, 3)
    kinds = {"pre_norm": ["pre"] * layers, "post_norm": ["post"] * layers,
             "mixed": [rng.choice(["pre", "post"]) for _ in range(layers)]}[family]
    if family == "mixed" and len(set(kinds)) == 1:  # both kinds, one after the other
        kinds[-1] = "pre" if kinds[0] == "post" else "post"
    dims = [256, 512, 1000, 1024, 2048] if cuda else [16, 32, 40, 64]
    ffs = [512, 1024, 2816, 4096] if cuda else [32, 48, 64]
    m = rng.choice([1, 7, rng.randint(1, max_m), max_m])
    three_d = m > 1 and rng.random() < 0.5
    batch = rng.choice([d for d in (2, 3, 4) if m % d == 0] or [1]) if three_d else None
    dtypes = [torch.bfloat16, torch.float16, torch.float32] if cuda else [torch.float32, torch.float16]
    train = rng.random() < 0.5
    dtype = rng.choice(dtypes)
    d = rng.choice(dims)
    head_dims = [h for h in ([64, 128] if cuda else [8, 16]) if d % h == 0] or [d]
    case = dict(family=family, kinds=kinds, d=d, ff=rng.choice(ffs), m=m, batch=batch,
                dtype=dtype, train=train, eps=rng.choice([1e-5, 1e-6, 1e-12]), bias=rng.random() < 0.5,
                norms=[rng.choice(list(NORMS)) for _ in range(layers + 1)],
                mlps=[rng.choice(["plain", "gated", "qkv", "attention"]) for _ in range(layers)],
                head_dim=rng.choice(head_dims), qk_norm=_qk_norm(rng.random()),
                rope=rng.choice([None, "slice", "chunk", "flipped", "interleaved", "complex", "partial",
                                 "partial_half", "partial_quarter", "partial_uneven"]),
                acts=[rng.choice(list(ACTIVATIONS)) for _ in range(layers)],
                layout=rng.choice(["contiguous", "contiguous", "transposed", "sliced"]),
                mean=rng.choice([0.0, 0.0, 10.0, 1000.0]), seed=rng.randrange(2**31), config=rng.randrange(64),
                # dynamic=True, and a second length (another sequence length of a 3-D input)
                dynamic=rng.random() < 0.3, m2=m + (batch or 1) * rng.randint(1, 9))
    # the attention's q projection with output gates (Qwen3-Next's), drawn apart from ``rng``: the cases drawn
    # before it was added stay the same
    case["gated_q"] = random.Random(case["seed"]).random() < 0.3
    case["qk_layer_norm"] = random.Random(case["seed"] + 1).random() < 0.3  # Cohere's QK-norm, drawn apart too
    return case


def _qk_norm(draw: float):
    """QK-norm before RoPE (Qwen3's), without weight after it (NanoChat's), with one after it (HunYuan's), or
    none."""
    return True if draw < 0.45 else "after_rope" if draw < 0.55 else "weighted_after_rope" if draw < 0.65 else False


def build(case: dict) -> Model:
    torch.manual_seed(case["seed"])
    d, ff, eps = case["d"], case["ff"], case["eps"]
    blocks = []
    for i, kind in enumerate(case["kinds"]):
        norm = NORMS[case["norms"][i]](d, eps)
        if kind == "pre" and case["mlps"][i] == "attention":
            blocks.append(PreNormAttention(norm, d, case["head_dim"], case["qk_norm"], case["rope"], case["bias"], eps,
                                           gated_q=case.get("gated_q", False),
                                           qk_layer_norm=case.get("qk_layer_norm", False)))
        elif kind == "pre":
            blocks.append(PreNormBlock(norm, d, ff, case["mlps"][i], case["acts"][i], case["bias"]))
        else:
            blocks.append(PostNormBlock(norm, d, ff, case["acts"][i], case["bias"]))
    final_norm = NORMS[case["norms"][-1]](d, eps) if case["kinds"][-1] == "pre" else None
    model = Model(blocks, final_norm, nn.Linear(d, 64 if d > 64 else 24, bias=case["bias"]))
    with torch.no_grad():  # weights that show a missing γ or β: γ near 1 (Gemma stores γ − 1), β near 0
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.1 * torch.randn_like(p) + (1.0 if name.endswith("weight") and p.abs().sum() > 0 else 0.0))
    return model


def make_input(case: dict, device: str, m: int) -> torch.Tensor:
    """[m, d] or [batch, m/batch, d] in the case's layout, its rows' mean ``case["mean"]`` σ from 0."""
    g = torch.Generator(device="cpu").manual_seed(case["seed"] + m)
    shape = (m, case["d"]) if case["batch"] is None else (case["batch"], m // case["batch"], case["d"])
    values = torch.randn(shape, generator=g) + case["mean"]
    if case["layout"] == "transposed":  # the same values, the last dim not contiguous
        return values.transpose(-1, -2).contiguous().to(device, case["dtype"]).transpose(-1, -2)
    if case["layout"] == "sliced":  # a wider row stride
        wide = torch.zeros(*shape[:-1], shape[-1] + 8)
        wide[..., :shape[-1]] = values
        return wide.to(device, case["dtype"])[..., :shape[-1]]
    return values.to(device, case["dtype"])


def check_case(case: dict, device: str) -> collections.Counter:
    """The case's site outcomes ("rewritten", "not rewritten: REASON"); raises AssertionError on a wrong result or
    a site without a reason. Each case is checked twice at its length (a second call reads what the first kept);
    a dynamic case is compiled with ``dynamic=True`` and checked at a second length too."""
    model = build(case).to(device, case["dtype"])
    model64, eager = copy.deepcopy(model).double(), copy.deepcopy(model)
    torch._dynamo.reset()
    nfi.clear_reports()
    compiled = torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"policy": "always"}},
                             dynamic=True if case["dynamic"] else None)
    outcomes = collections.Counter()
    for m in _lengths(case):
        for why in _compare(compiled, (model, model64, eager), make_input(case, device, m), case):
            outcomes[f"quantities not compared: {why}"] += 1
    for site in nfi.reports():
        assert site.reason, f"a site without a reason: {site.line()} in {case}"
        outcomes["rewritten" if site.rewritten else f"not rewritten: {site.reason.split(';')[0][:90]}"] += 1
    return outcomes


def _lengths(case: dict) -> list:
    """The input lengths a case is called at, in order: twice the first (state kept between calls, the inference
    fold cache, shows at the second), then a dynamic case's second length."""
    return [case["m"], case["m"]] + ([case["m2"]] if case["dynamic"] else [])


def _compare(compiled, modules, x, case) -> list:
    """One call of the compiled model against float64 and eager: the output and, in training, the input's and
    every parameter's gradient (module doc). Returns the quantities not compared: those whose float64 value is
    exactly zero (the q/k projections' gradients of one token, whose softmax runs over one key) or zero in exact
    arithmetic only (the key bias's gradient: eager misses it by over 100 %), where a relative error means
    nothing, gradients off by no more than a ReLU kink explains (``_kink_allowance``), and quantities whose error
    is within twice what a rounding unit's change of the inputs and parameters moves eager's
    (``_rounding_allowance``: ill-conditioned, eager's own error a lucky draw): why, for each."""
    model, model64, eager = modules
    for module in modules:
        module.zero_grad(set_to_none=True)
    train, tol = case["train"], TOL[case["dtype"]]
    xc, x64, xe = (x.detach().clone().requires_grad_(train), x.detach().double().requires_grad_(train),
                   x.detach().clone().requires_grad_(train))
    with torch.set_grad_enabled(train):
        out = compiled(xc)
        ref = model64(x64)
        eager_out = eager(xe)
    where = f"at input shape {tuple(x.shape)} in {case}"
    assert torch.isfinite(out).all() or not torch.isfinite(eager_out).all(), f"non-finite output {where}"
    values = {"output": (out, ref, eager_out)}
    if train:
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(case["seed"] + 2)).to(x.device)
        out.backward(grad.to(out.dtype))
        ref.backward(grad.double())
        eager_out.backward(grad.to(out.dtype))
        values["input grad"] = (xc.grad, x64.grad, xe.grad)
        for (name, p), p64, pe in zip(model.named_parameters(), model64.parameters(), eager.parameters()):
            values[f"grad of {name}"] = (p.grad, p64.grad, pe.grad)
    not_compared, allowance, rounding = [], None, None
    for what, (value, value64, value_eager) in values.items():
        if not value64.any():
            not_compared.append("float64 value exactly zero")
            continue
        err, eager_err = rel_err(value, value64), rel_err(value_eager, value64)
        if eager_err > 1.0:  # zero in exact arithmetic (the key bias's gradient: softmax ignores it), float64 noise
            not_compared.append("eager's error over 100 %: a value zero in exact arithmetic")
            continue
        limit = max(tol * (2 if what != "output" else 1), 2 * eager_err)  # gradients: two GEMMs deep
        if err > limit and what != "output" and "relu" in case["acts"]:
            allowance = allowance or _kink_allowance(model64, x64, grad, values, case["dtype"])
            if err <= limit + allowance[what]:
                not_compared.append("gradient off by what a ReLU kink explains")
                continue
        if err > limit:
            rounding = rounding or _rounding_allowance(eager, x, grad if train else None, values, case)
            if err <= 2 * rounding[what]:
                not_compared.append("error within twice what rounding the inputs moves eager's (ill-conditioned)")
                continue
        assert err <= limit, (f"{what}: error {err:.2e} against float64 (limit {limit:.2e}, eager's "
                              f"{eager_err:.2e}) {where}")
    return not_compared


def _kink_allowance(model64, x64, grad, values, dtype) -> dict:
    """How far each float64 gradient moves when every ReLU input within 4 rounding units (of the model's dtype,
    relative to the input's rms) of 0 takes the other side of the kink: a 16-bit model's rounding may put such an
    input on either side, and at a tiny M one flipped element moves a whole row of a weight's gradient."""
    x = x64.detach().requires_grad_()
    model64.zero_grad(set_to_none=True)
    _KinkedReLU.band = 4 * torch.finfo(dtype).eps
    try:
        model64(x).backward(grad.double())
    finally:
        _KinkedReLU.band = 0.0
    flipped = {"input grad": x.grad, **{f"grad of {n}": p.grad for n, p in model64.named_parameters()}}
    return {what: rel_err(flipped[what], values[what][1]) if flipped.get(what) is not None else 0.0
            for what in values}


def _rounding_allowance(eager, x, grad, values, case, draws: int = 4) -> dict:
    """Per quantity, the largest error against float64 of eager in the model's dtype over ``draws`` runs with the
    input and every parameter multiplied by 1 + ε·u (u uniform in [-1, 1], ε the dtype's machine epsilon): how far
    rounding the inputs alone moves the result. Where that is large the quantity is ill-conditioned in this dtype
    (a stream of mean 1000 whose near-uniform attention leaves the q projection's gradient to cancellation: eager
    itself moves 4-24 % on such a draw), and eager's own error against float64 is one draw of it."""
    eps = torch.finfo(case["dtype"]).eps
    worst = {what: 0.0 for what in values}
    gen = torch.Generator().manual_seed(case["seed"] + 3)

    def jitter(t):
        u = torch.rand(t.shape, generator=gen, dtype=torch.float64).to(t.device) * 2 - 1
        return (t.double() * (1 + eps * u)).to(t.dtype)

    for _ in range(draws):
        model = copy.deepcopy(eager)
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(jitter(p))
        xj = jitter(x.detach()).requires_grad_(grad is not None)
        with torch.set_grad_enabled(grad is not None):
            out = model(xj)
            if grad is not None:
                out.backward(grad.to(out.dtype))
        got = {"output": out, "input grad": xj.grad, **{f"grad of {n}": p.grad for n, p in model.named_parameters()}}
        for what, (_, value64, _) in values.items():
            if got.get(what) is not None:
                worst[what] = max(worst[what], rel_err(got[what], value64))
    return worst


def _default_fails_too(case: dict, device: str) -> bool:
    """Whether plain torch.compile (Inductor, no plugin) fails on the case's model and first input too."""
    model = build(case).to(device, case["dtype"])
    torch._dynamo.reset()
    x = make_input(case, device, case["m"]).detach().requires_grad_(case["train"])
    try:
        with torch.set_grad_enabled(case["train"]):
            out = torch.compile(model, dynamic=True if case["dynamic"] else None)(x)
            if case["train"]:
                out.float().sum().backward()
    except Exception:
        return True
    return False


def _default_wrong_too(case: dict, device: str) -> bool:
    """Whether plain torch.compile (Inductor, no plugin) fails the same bounds on the case's inputs, called at
    the same lengths in the same order (a dynamic case's second length compiles again)."""
    model = build(case).to(device, case["dtype"])
    model64, eager = copy.deepcopy(model).double(), copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=True if case["dynamic"] else None)
    try:
        for m in _lengths(case):
            _compare(compiled, (model, model64, eager), make_input(case, device, m), case)
    except AssertionError:
        return True
    except Exception:  # a crash of its own is not the same wrong result
        return False
    return False


def _drawn_config(case: dict):
    """The tuner's ``fastest_config`` stand-in: the case's drawn config among those it would time; the tuner's memo
    is filled as usual."""
    def pick(configs, run, what, compile_only=None, time_one=None):
        return first_running_config(configs, run, case["config"], what)
    return pick


def run(cases: int, seed: int, device: str, max_m: int, progress: int = 0, shard: int = 0, shards: int = 1,
        time_limit: float | None = None) -> dict:
    """{family: Counter of site outcomes and cases}; raises on the first wrong case (module doc)."""
    deadline = time.monotonic() + time_limit if time_limit else None
    rng = random.Random(seed)
    summary = {f: collections.Counter() for f in FAMILIES}
    fastest_config = eg.fastest_config
    with tuning.override(interpret_on_cpu=device == "cpu"):
        for i in range(cases):
            case = random_case(rng, device, max_m)
            if i % shards != shard:
                continue
            if deadline is not None and time.monotonic() > deadline:
                print(f"time limit: stopped before case {i}", flush=True)
                break
            eg.fastest_config = _drawn_config(case)
            try:
                summary[case["family"]].update(check_case(case, device))
                summary[case["family"]]["cases"] += 1
            except Exception as error:
                out_of_memory = (error, getattr(error, "inner_exception", None))  # Dynamo wraps a compile's
                if any(isinstance(e, torch.OutOfMemoryError) for e in out_of_memory):
                    summary[case["family"]]["cases skipped: out of memory"] += 1
                    torch.cuda.empty_cache()
                elif isinstance(error, AssertionError) and _default_wrong_too(case, device):
                    # Inductor's own wrong result: counted, and printed for a report upstream
                    print(f"torch.compile default is wrong too: {error}", flush=True)
                    summary[case["family"]]["cases skipped: torch.compile default is wrong too"] += 1
                elif isinstance(error, AssertionError):
                    raise
                elif _default_fails_too(case, device):  # Inductor's own (its CPU fp16 training codegen, say)
                    summary[case["family"]]["cases skipped: torch.compile default fails too"] += 1
                elif device == "cpu" and "CppCompileError" in repr(getattr(error, "inner_exception", error)):
                    # Inductor's C++ code for the rewritten fp16 graph (a test-only path: the plugin fuses on
                    # the CPU only in the interpreter) does not compile, e.g. a twice-declared accumulator
                    summary[case["family"]]["cases skipped: Inductor's C++ codegen fails on the rewritten graph"] += 1
                else:  # a crash: name the case, for --case
                    raise RuntimeError(f"{type(error).__name__} in {case}") from error
            finally:
                eg.fastest_config = fastest_config
            if progress and (i + 1) % progress == 0:
                print(f"{i + 1} cases, 0 wrong", flush=True)
    return summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=20)
    p.add_argument("--max-m", type=int, default=None, help="rows at most (default 16384 on the GPU, 24 on the CPU)")
    p.add_argument("--case", help="check one case again, as a failure prints it: \"{'family': ...}\"")
    add_run_arguments(p)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.case:
        case = eval(args.case, {"torch": torch})  # the printed dict: plain literals and torch dtypes
        eg.fastest_config = _drawn_config(case)
        with tuning.override(interpret_on_cpu=device == "cpu"):
            print(dict(check_case(case, device)))
        return 0
    max_m = args.max_m or (16384 if device == "cuda" else 24)
    if args.workers > 1:
        argv = ["--cases", str(args.cases), "--seed", str(args.seed), "--max-m", str(max_m)]
        return run_workers(__file__, argv + (["--time-limit", str(args.time_limit)] if args.time_limit else []),
                           args.workers, FAMILIES)
    limit_worker_memory(args.shards)
    summary = run(args.cases, args.seed, device, max_m, progress=10 // args.shards or 1, shard=args.shard,
                  shards=args.shards, time_limit=args.time_limit)
    return report(summary, args.summary_json)


if __name__ == "__main__":
    sys.exit(main())
