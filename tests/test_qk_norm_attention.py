"""QK-norm attention on the CPU: the kernels under TRITON_INTERPRET=1 (fp32, fp16) against float64 and against
eager in the same dtype, forward and gradients, causal or not, grouped-query, with and without the rotary
embedding; the op (fake, opcheck); the pattern on an HF-style attention module, compiled, and its refusals."""

import os

import pytest
import torch
import torch.nn.functional as F

import norm_fusion_inductor as nfi
from norm_fusion_inductor import qk_norm_ops
from norm_fusion_inductor.kernels import qk_norm_attention as kernels

from .helpers import LlamaRMSNorm, interpret_kernels, record_kernel_calls, rel_err

interpreter = pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="CPU interpreter tests")
reference = qk_norm_ops.qk_norm_attention_reference


def _rope_tables(batch, seq, head_dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    angles = torch.arange(seq)[:, None] * torch.rand(head_dim // 2, generator=g)[None]
    emb = torch.cat((angles, angles), -1)
    return emb.cos()[None].expand(batch, -1, -1).to(dtype), emb.sin()[None].expand(batch, -1, -1).to(dtype)


def _case(batch=2, heads=4, kv_heads=2, q_len=19, kv_len=19, head_dim=32, rope=True, dtype=torch.float32, seed=0):
    """Operands as a model's projections leave them: [B, L, H, D] memory seen as [B, H, L, D]."""
    g = torch.Generator().manual_seed(seed)

    def heads_of(n, length, std):
        return (torch.randn(batch, length, n, head_dim, generator=g) * std).to(dtype).transpose(1, 2)

    q, k, v = heads_of(heads, q_len, 1.0), heads_of(kv_heads, kv_len, 3.0), heads_of(kv_heads, kv_len, 1.0)
    weights = [(0.5 + torch.rand(head_dim, generator=g)).to(dtype) for _ in range(2)]
    tables = _rope_tables(batch, q_len, head_dim, dtype, seed) if rope else (None, None)
    return [q, k, v, *weights], tables


def _run(fn, tensors, tables, grad, causal, cast=None):
    leaves = [(t.to(cast) if cast else t).detach().requires_grad_() for t in tensors]
    tables = [t.to(cast) if (cast and t is not None) else t for t in tables]
    out = fn(*leaves, *tables, causal)
    grads = torch.autograd.grad(out, leaves, grad.to(out.dtype))
    return out, grads


def _fused(q, k, v, wq, wk, cos, sin, causal):
    return qk_norm_ops.qk_norm_attention(q, k, v, wq, wk, cos, sin, causal=causal)


def _reference(q, k, v, wq, wk, cos, sin, causal):
    return reference(q, k, v, wq, wk, cos, sin, 1e-6, 1e-6, q.shape[-1] ** -0.5, causal)


def _check_against_float64(case_kwargs, causal, tol):
    tensors, tables = _case(**case_kwargs)
    q = tensors[0]
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
    out, grads = _run(_fused, tensors, tables, grad, causal)
    ref, ref_grads = _run(_reference, tensors, tables, grad, causal, cast=torch.float64)
    eager, eager_grads = _run(_reference, tensors, tables, grad, causal)
    assert rel_err(out, ref) <= max(tol, 2 * rel_err(eager, ref)), f"out {rel_err(out, ref):.2e}"
    for name, g, r, e in zip(("dq", "dk", "dv", "dw_q", "dw_k"), grads, ref_grads, eager_grads):
        assert g.shape == r.shape and g.dtype == tensors[0].dtype, name
        assert rel_err(g, r) <= max(tol, 2 * rel_err(e, r)), f"{name} {rel_err(g, r):.2e} (eager {rel_err(e, r):.2e})"


@interpreter
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("rope", [True, False], ids=["rope", "no_rope"])
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (2, 2)], ids=["gqa", "mha"])
def test_kernels_match_float64_fp32(causal, rope, heads, kv_heads, monkeypatch):
    interpret_kernels(monkeypatch)
    _check_against_float64(dict(heads=heads, kv_heads=kv_heads, rope=rope), causal, 1e-5)


@interpreter
@pytest.mark.parametrize("q_len,kv_len,causal", [(9, 40, False), (40, 24, True), (33, 33, True)])
def test_kernels_ragged_lengths(q_len, kv_len, causal, monkeypatch):
    """Lengths that are no multiple of the blocks, shorter and longer keys (causal: top-left aligned, as SDPA)."""
    interpret_kernels(monkeypatch)
    _check_against_float64(dict(q_len=q_len, kv_len=kv_len, rope=False, head_dim=64), causal, 1e-5)


@interpreter
def test_kernels_match_float64_fp16(monkeypatch):
    interpret_kernels(monkeypatch)
    _check_against_float64(dict(dtype=torch.float16), True, 2e-3)


@interpreter
def test_kernels_write_every_output(monkeypatch):
    """Every buffer the kernels allocate starts as NaN: a row or gradient they forget shows up."""
    interpret_kernels(monkeypatch)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))
    _check_against_float64(dict(q_len=21, kv_len=21), True, 1e-5)


@interpreter
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_descriptor_and_pointer_loads_agree(causal):
    """The tensor-descriptor (TMA) loads against the pointer loads, same operands, forward and backward; the
    lengths are no multiple of the blocks (descriptor rows past the end read as zeros)."""
    (q, k, v, wq, wk), (cos, sin) = _case(q_len=21, kv_len=21)
    grad = torch.randn(q.shape)
    results = []
    for tma in (False, True):
        saved = kernels.forward(q, k, v, wq, wk, cos, sin, 1e-6, 1e-6, 0.2, causal, True, tma=tma)
        results.append([saved[0], *kernels.backward(grad, q, k, v, wq, wk, cos, sin, 1e-6, 0.2, causal, *saved,
                                                    tma=tma)])
    for a, b in zip(*results):
        assert rel_err(a, b) < 1e-6


@interpreter
def test_q_hat_recomputed_when_not_saved(monkeypatch):
    """The forward stores q̂ only for training; a backward without it recomputes q̂ and gives the same grads."""
    interpret_kernels(monkeypatch)
    (q, k, v, wq, wk), (cos, sin) = _case()
    grad = torch.randn(q.shape)
    grads = []
    for save in (True, False):
        saved = kernels.forward(q, k, v, wq, wk, cos, sin, 1e-6, 1e-6, 0.2, True, save)
        assert saved[4].numel() == (q.numel() if save else 0)
        grads.append(kernels.backward(grad, q, k, v, wq, wk, cos, sin, 1e-6, 0.2, True, *saved))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


@interpreter
def test_op_fake_and_opcheck(monkeypatch):
    interpret_kernels(monkeypatch)
    tensors, tables = _case(q_len=8, kv_len=8)
    for save in (True, False):
        torch.library.opcheck(torch.ops.norm_fusion.qk_norm_attention.default,
                              (*tensors, *tables, 1e-6, 1e-6, 0.2, True, save),
                              test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    saved = kernels.forward(*tensors, *tables, 1e-6, 1e-6, 0.2, True, True)
    grad = torch.randn(tensors[0].shape)
    torch.library.opcheck(torch.ops.norm_fusion.qk_norm_attention_backward.default,
                          (grad, *tensors, *tables, 1e-6, 0.2, True, *saved),
                          test_utils=("test_schema", "test_faketensor"))


def test_reference_path_gradcheck():
    """On the CPU without the interpreter flag the op runs the reference; its autograd formula differentiates
    the recomputed reference."""
    tensors, tables = _case(batch=1, heads=2, kv_heads=1, q_len=5, kv_len=5, head_dim=8, dtype=torch.float64)
    leaves = [t.detach().requires_grad_() for t in tensors]
    assert torch.autograd.gradcheck(lambda *a: _fused(*a, *tables, True), leaves)


def test_unsupported_operands_have_reasons():
    tensors, _ = _case()
    q, k, v = tensors[:3]
    assert kernels.unsupported_reason(q, k, v, False) is None
    assert "head_dim" in kernels.unsupported_reason(q[..., :24], k[..., :24], v[..., :24], False)
    assert "GQA" in kernels.unsupported_reason(q[:, :3], k, v, False)
    assert "rotary" in kernels.unsupported_reason(q[:, :, :5], k, v, True)
    assert "dtypes" in kernels.unsupported_reason(q.double(), k, v, False)


class QKNormAttention(torch.nn.Module):
    """Qwen3's attention as transformers writes it (projections, per-head LlamaRMSNorm on q and k, RoPE,
    SDPA with GQA, output projection). ``variant`` bends it in ways the pattern must follow or must refuse."""

    def __init__(self, hidden=64, heads=4, kv_heads=2, head_dim=32, variant=""):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.variant = heads, kv_heads, head_dim, variant
        self.q_proj = torch.nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = torch.nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = torch.nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = torch.nn.Linear(heads * head_dim, hidden, bias=False)
        norm = (lambda: torch.nn.RMSNorm(head_dim, eps=1e-6)) if variant == "nn_rms_norm" else \
            (lambda: LlamaRMSNorm(head_dim))
        self.q_norm, self.k_norm = norm(), norm()

    @staticmethod
    def _rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, h, cos, sin):
        B, L, _ = h.shape
        shape = (B, L, -1, self.head_dim)
        if self.variant == "transpose_first":
            q = self.q_norm(self.q_proj(h).view(shape).transpose(1, 2))
            k = self.k_norm(self.k_proj(h).view(shape).transpose(1, 2))
        else:
            q = self.q_norm(self.q_proj(h).view(shape)).transpose(1, 2)
            k = self.k_norm(self.k_proj(h).view(shape)).transpose(1, 2)
        v = self.v_proj(h).view(shape).transpose(1, 2)
        if self.variant != "no_rope":
            cos_u, sin_u = cos.unsqueeze(1), sin.unsqueeze(1)
            q = q * cos_u + self._rotate_half(q) * sin_u
            k = k * cos_u + self._rotate_half(k) * (cos_u if self.variant == "other_tables" else sin_u)
        mask = torch.ones(L, L, dtype=torch.bool).tril() if self.variant == "mask" else None
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.variant not in ("full", "mask"),
                                           enable_gqa=self.heads != self.kv_heads)
        out = self.o_proj(a.transpose(1, 2).reshape(B, L, -1))
        return (out, q) if self.variant == "leak" else out


def _module_operands(module, seq=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for norm in (module.q_norm, module.k_norm):
            norm.weight.uniform_(0.5, 1.5, generator=g)
    h = torch.randn(2, seq, 64, generator=g).requires_grad_()
    return h, *_rope_tables(2, seq, module.head_dim, torch.float32, seed)


def _compile(module, *inputs, policy="always"):
    torch._dynamo.reset()  # Dynamo would reuse a graph compiled for an equal module: the pass would not run
    before = len(nfi.reports())
    compiled = torch.compile(module, backend="norm_fusion",
                             options={"norm_fusion": {"policy": policy, "fusions": ("qk_norm_attention",)}})
    out = compiled(*inputs)
    return out, [r for r in nfi.reports()[before:] if r.fusion == "qk_norm_attention"]


@pytest.mark.parametrize("variant,kv_heads", [("", 2), ("full", 2), ("no_rope", 2), ("transpose_first", 2),
                                              ("nn_rms_norm", 4)])
def test_module_rewritten_training_matches_eager(variant, kv_heads):
    torch.manual_seed(0)
    module = QKNormAttention(kv_heads=kv_heads, variant=variant)
    h, cos, sin = _module_operands(module)
    ref = module(h, cos, sin)
    params = [h, *module.parameters()]
    ref_grads = torch.autograd.grad(ref.square().sum(), params)
    out, sites = _compile(module, h, cos, sin)
    grads = torch.autograd.grad(out.square().sum(), params)
    assert [s.rewritten for s in sites] == [True], [s.reason for s in sites]
    assert sites[0].pattern == ("rms_norm" if variant == "no_rope" else "rms_norm_rope")
    assert sites[0].shape == (2, 8, 8, 4, kv_heads, 32)
    assert rel_err(out, ref) < 1e-5
    for g, r in zip(grads, ref_grads):
        assert rel_err(g, r) < 1e-5


@interpreter
def test_module_compiled_runs_the_kernels(monkeypatch):
    """Under the interpreter the compiled graph calls the op, whose kernels run forward and backward."""
    calls = record_kernel_calls(monkeypatch, kernels)
    module = QKNormAttention()
    h, cos, sin = _module_operands(module, seed=3)
    ref = module(h, cos, sin)
    ref_grad = torch.autograd.grad(ref.sum(), h)[0]
    out, sites = _compile(module, h, cos, sin)
    grad = torch.autograd.grad(out.sum(), h)[0]
    assert sites[0].rewritten and calls == ["forward", "backward"]
    assert rel_err(out, ref) < 1e-5 and rel_err(grad, ref_grad) < 1e-5


@pytest.mark.parametrize("variant,reason", [
    ("mask", "mask"),
    ("leak", "another reader"),
    ("other_tables", "same cos/sin"),
])
def test_module_not_rewritten_says_why(variant, reason):
    module = QKNormAttention(variant=variant)
    h, cos, sin = _module_operands(module)
    out, sites = _compile(module, h, cos, sin)
    ref = module(h, cos, sin)
    assert len(sites) == 1 and not sites[0].rewritten and reason in sites[0].reason, [s.reason for s in sites]
    out, ref = (out[0], ref[0]) if isinstance(out, tuple) else (out, ref)
    assert rel_err(out, ref) < 1e-5


def test_policy_auto_on_cpu_keeps_the_unfused_path():
    module = QKNormAttention()
    out, sites = _compile(module, *_module_operands(module), policy="auto")
    assert not sites[0].rewritten and "no fused kernel for device 'cpu'" in sites[0].reason


def test_function_errors_name_the_argument():
    tensors, (cos, sin) = _case()
    with pytest.raises(ValueError, match="cos and sin"):
        qk_norm_ops.qk_norm_attention(*tensors, cos, None)


@interpreter
def test_hf_qwen3_training_runs_the_kernels(monkeypatch):
    """transformers' Qwen3 (tiny, head_dim 16): both layers' QK-norm sites fused, the kernels run forward and
    backward under the interpreter, logits and gradients match eager."""
    pytest.importorskip("transformers")
    from norm_fusion_inductor import hf_models

    calls = record_kernel_calls(monkeypatch, kernels)
    torch.manual_seed(0)
    model = hf_models.tiny_model("qwen3").train()
    for name, p in model.named_parameters():
        if "norm" in name:
            p.data.uniform_(0.5, 1.5)
    inputs = hf_models.example_inputs(model)
    ref = model(**inputs).logits
    grad = torch.randn_like(ref)
    ref_grads = torch.autograd.grad((ref * grad).sum(), list(model.parameters()))
    torch._dynamo.reset()
    before = len(nfi.reports())
    compiled = torch.compile(model, backend="norm_fusion",
                             options={"norm_fusion": {"policy": "always", "fusions": ("qk_norm_attention",)}})
    out = compiled(**inputs).logits
    grads = torch.autograd.grad((out * grad).sum(), list(model.parameters()))
    sites = [r for r in nfi.reports()[before:] if r.fusion == "qk_norm_attention"]
    assert [s.rewritten for s in sites] == [True, True], [s.line() for s in sites]
    assert calls == ["forward", "forward", "backward", "backward"]
    assert rel_err(out, ref) < 1e-5
    for g, r in zip(grads, ref_grads):
        assert (g - r).norm() <= 1e-4 * r.norm() + 1e-6
    torch._dynamo.reset()
