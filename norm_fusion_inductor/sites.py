"""What the selection decides about: one description per kind of site (a matmul with the norm after it, an attention
block, a GEMM of a regrouped chain) and the operands a post-norm site is timed with. A leaf module: the selection, the child
process that compiles a site (``measure_block``) and the calibration all read it."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class PostNormSite:
    """A matmul → norm site (the post-norm: the norm as the GEMM's epilogue):
    y = norm(x Wᵀ + b + residual) (+ residual_out), x [M, K], W [N, K] (or [K, N])."""

    M: int
    K: int
    N: int
    dtype: torch.dtype
    device: torch.device
    has_norm_weight: bool
    has_bias: bool
    norm: str = "rms"  # "rms" or "ln"
    has_norm_bias: bool = False
    weight_kn: bool = False  # weight stored [K, N] (Conv1D)
    has_residual: bool = False  # z = x Wᵀ + b + residual
    write_z: bool = False  # z is written too
    has_residual_out: bool = False  # a residual added after the norm


def post_norm_operands(site: PostNormSite) -> dict:
    """Random operands shaped like the site's (x, w, g, beta, b, residual, residual_out). They look like real ones
    (γ near 1, W scaled by 1/√K): the H200's clocks depend on the data the tensor cores see."""
    dev, dt = site.device, site.dtype
    w = (torch.randn(site.N, site.K, device=dev) / site.K**0.5).to(dt)
    return dict(
        x=torch.randn(site.M, site.K, device=dev, dtype=dt),
        w=w.t().contiguous() if site.weight_kn else w,
        g=(1 + 0.1 * torch.randn(site.N, device=dev)).to(dt) if site.has_norm_weight else None,
        beta=(0.1 * torch.randn(site.N, device=dev)).to(dt) if site.has_norm_bias else None,
        b=torch.randn(site.N, device=dev, dtype=dt) if site.has_bias else None,
        residual=torch.randn(site.M, site.N, device=dev, dtype=dt) if site.has_residual else None,
        residual_out=torch.randn(site.M, site.N, device=dev, dtype=dt) if site.has_residual_out else None,
    )


@dataclasses.dataclass(frozen=True)
class AttentionSite:
    batch: int
    q_len: int
    kv_len: int
    heads: int
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    activation: str
    has_ln_weight: bool
    has_ln_bias: bool
    has_rms_weight: bool
    train: bool = False  # the graph is differentiated: forward and backward are measured
    kv_grad: bool = True  # in training, k or v needs a gradient (else the dK/dV kernel does not run)

    @property
    def shape(self) -> tuple:
        return (self.batch, self.q_len, self.kv_len, self.heads, self.head_dim)


@dataclasses.dataclass(frozen=True)
class EpilogueSite:
    """One GEMM of a regrouped chain (patterns/regrouped_norm.py): a consumer (``row_norm``, ``activation``) or
    the stream's producer (``residual``, ``stats``). ``saved_bytes``: the device-memory traffic of the unfused
    graph that this GEMM's epilogue removes (the normalized tensor's write, the GEMM output's round trip into
    the activation or the residual add)."""

    M: int
    N: int
    K: int
    dtype: torch.dtype
    device: torch.device
    row_norm: str
    activation: str
    write_aux: bool
    stats: str
    residual: bool
    w_kn: bool
    saved_bytes: int
    residual_norm: str = "none"
    head_dim: int = 0  # a per-head RMSNorm (QK-norm) in the epilogue
    rope: bool = False  # and RoPE after it
    head_norm: bool = True  # with head_dim: False leaves the per-head norm out (RoPE alone)
    fold_bytes: int = 0  # the weight-side passes the fused path adds per call (γ folded into W in training)
    rope_interleaved: bool = False  # RoPE's pairs neighbouring columns (GPT-J's form), not halves
    rope_dim: int = 0  # RoPE over the halves of the first rope_dim columns of a head (partial rotary); 0: the head
    head_gates: bool = False  # the odd heads are the even ones' output gates, passed through (Qwen3-Next's q)
    head_center: bool = False  # the per-head norm a LayerNorm (Cohere's QK-norm), not an RMSNorm
