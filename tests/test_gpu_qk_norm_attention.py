"""GPU tests of the QK-norm attention kernels: causal or not, GQA, with and without RoPE, bf16 and fp16, lengths
that are no multiple of the blocks, against float64 and eager in the same dtype, forward and gradients, memory
poisoned; the HF-style module compiled end to end; policy auto. Skipped without CUDA."""

import pytest
import torch

from norm_fusion_inductor import qk_norm_ops

from .helpers import rel_err
from .test_gpu import _poison_allocator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _operands(batch, seq, heads, kv_heads, head_dim, rope, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def heads_of(n, std):
        return (torch.randn(batch, seq, n, head_dim, generator=g, device="cuda") * std).to(dtype).transpose(1, 2)

    tensors = [heads_of(heads, 1.0), heads_of(kv_heads, 3.0), heads_of(kv_heads, 1.0)]
    tensors += [(0.5 + torch.rand(head_dim, generator=g, device="cuda")).to(dtype) for _ in range(2)]
    tables = (None, None)
    if rope:
        angles = torch.arange(seq, device="cuda")[:, None] * torch.rand(head_dim // 2, generator=g, device="cuda")
        emb = torch.cat((angles, angles), -1)[None].expand(batch, -1, -1)
        tables = (emb.cos().to(dtype), emb.sin().to(dtype))
    return tensors, tables


def _run(fn, tensors, tables, grad, cast=None):
    leaves = [(t.to(cast) if cast else t).detach().requires_grad_() for t in tensors]
    tables = [t.to(cast) if (cast and t is not None) else t for t in tables]
    out = fn(*leaves, *tables)
    return out, torch.autograd.grad(out, leaves, grad.to(out.dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("seq,heads,kv_heads,head_dim,causal,rope", [
    (1030, 8, 2, 128, True, True), (257, 4, 4, 64, False, True), (300, 8, 1, 128, True, False),
    (129, 4, 2, 32, False, False)])
def test_matches_float64(dtype, seq, heads, kv_heads, head_dim, causal, rope):
    tensors, tables = _operands(2, seq, heads, kv_heads, head_dim, rope, dtype, seed=seq)
    grad = torch.randn(tensors[0].shape, device="cuda", dtype=dtype)
    scale = head_dim ** -0.5

    def fused(*a):
        return qk_norm_ops.qk_norm_attention(*a, causal=causal)

    def reference(q, k, v, wq, wk, cos, sin):
        return qk_norm_ops.qk_norm_attention_reference(q, k, v, wq, wk, cos, sin, 1e-6, 1e-6, scale, causal)

    _poison_allocator()
    out, grads = _run(fused, tensors, tables, grad)
    ref, ref_grads = _run(reference, tensors, tables, grad, cast=torch.float64)
    eager, eager_grads = _run(reference, tensors, tables, grad)
    assert not out.isnan().any()
    assert rel_err(out, ref) <= max(1e-2, 1.5 * rel_err(eager, ref)), \
        f"out {rel_err(out, ref):.2e} (eager {rel_err(eager, ref):.2e})"
    for name, g, r, e in zip(("dq", "dk", "dv", "dw_q", "dw_k"), grads, ref_grads, eager_grads):
        assert not g.isnan().any(), f"{name}: NaN"
        assert rel_err(g, r) <= max(1e-2, 1.5 * rel_err(e, r)), f"{name}: {rel_err(g, r):.2e} (eager {rel_err(e, r):.2e})"


@pytest.mark.parametrize("causal", [True, False])
def test_descriptor_path_matches_pointer_path(causal):
    """The tensor-descriptor (TMA) loads against the pointer loads, same operands: forward and backward agree to
    rounding (the dots may tile differently)."""
    from norm_fusion_inductor.kernels import qk_norm_attention as kernels

    (q, k, v, wq, wk), (cos, sin) = _operands(2, 1030, 8, 2, 128, True, torch.bfloat16, seed=5)
    grad = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16)
    results = []
    for tma in (False, True):
        saved = kernels.forward(q, k, v, wq, wk, cos, sin, 1e-6, 1e-6, 0.088, causal, True, tma=tma)
        results.append([saved[0], *kernels.backward(grad, q, k, v, wq, wk, cos, sin, 1e-6, 0.088, causal, *saved,
                                                    tma=tma)])
    for name, a, b in zip(("out", "dq", "dk", "dv", "dw_q", "dw_k"), *results):
        assert rel_err(a, b) < 5e-3, f"{name} {rel_err(a, b):.2e}"


def _module(kv_heads=2):
    from .test_qk_norm_attention import QKNormAttention

    torch.manual_seed(0)
    module = QKNormAttention(hidden=1024, heads=16, kv_heads=kv_heads, head_dim=128).cuda()
    with torch.no_grad():
        for norm in (module.q_norm, module.k_norm):
            norm.weight.uniform_(0.5, 1.5)
    return module


def _module_inputs(seq=512, dtype=torch.bfloat16):
    h = torch.randn(2, seq, 1024, device="cuda")
    angles = torch.arange(seq, device="cuda")[:, None] * torch.rand(64, device="cuda")
    emb = torch.cat((angles, angles), -1)[None].expand(2, -1, -1)
    return h, emb.cos(), emb.sin()


def test_compiled_module_end_to_end():
    """The HF-style attention compiled with the plugin (policy always), bf16 training: rewritten; outputs and
    gradients as close to float64 as eager bf16's."""
    import norm_fusion_inductor as nfi

    torch._dynamo.reset()
    module = _module()
    h, cos, sin = _module_inputs()
    ref64 = _module().double()
    ref64.load_state_dict(module.state_dict())
    module = module.bfloat16()
    inputs16 = [h.bfloat16().requires_grad_(), cos.bfloat16(), sin.bfloat16()]
    inputs64 = [h.double().requires_grad_(), cos.double(), sin.double()]
    before = len(nfi.reports())
    compiled = torch.compile(module, backend="norm_fusion", options={"norm_fusion": {"policy": "always"}})
    out = compiled(*inputs16)
    sites = [s for s in nfi.reports()[before:] if s.fusion == "qk_norm_attention"]
    assert [(s.rewritten, s.implementation) for s in sites] == [(True, "fused_triton")], [s.line() for s in sites]
    grad = torch.randn_like(out)
    params = [inputs16[0], module.q_norm.weight, module.k_norm.weight, module.q_proj.weight]
    grads = torch.autograd.grad(out, params, grad)
    eager_in = [inputs16[0].detach().requires_grad_(), *inputs16[1:]]
    eager = module(*eager_in)
    eager_grads = torch.autograd.grad(eager, [eager_in[0], *params[1:]], grad)
    ref = ref64(*inputs64)
    ref_grads = torch.autograd.grad(ref, [inputs64[0], ref64.q_norm.weight, ref64.k_norm.weight,
                                          ref64.q_proj.weight], grad.double())
    assert rel_err(out, ref) <= max(1e-2, 1.5 * rel_err(eager, ref))
    for g, r, e in zip(grads, ref_grads, eager_grads):
        assert rel_err(g, r) <= max(2e-2, 1.5 * rel_err(e, r))


@pytest.mark.parametrize("train", [False, True])
def test_compiled_module_policy_auto_measures(train):
    """policy auto: the site is measured and the reason says so; whatever the choice, the output matches eager."""
    import norm_fusion_inductor as nfi

    torch._dynamo.reset()
    module = _module().bfloat16()
    h, cos, sin = (t.bfloat16() for t in _module_inputs())
    h.requires_grad_(train)
    before = len(nfi.reports())
    with torch.set_grad_enabled(train):
        out = torch.compile(module, backend="norm_fusion")(h, cos, sin)
    sites = [s for s in nfi.reports()[before:] if s.fusion == "qk_norm_attention"]
    assert len(sites) == 1 and ("forward + backward" if train else "forward:") in sites[0].reason, \
        [s.line() for s in sites]
    assert rel_err(out, module(h, cos, sin)) < 2e-2
