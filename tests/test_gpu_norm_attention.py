"""GPU tests of the norm → attention → norm kernels: every activation, affine on/off, bf16 and fp16, jagged rows,
against float64 and the eager block in the same dtype, forward and gradients, outputs poisoned. Skipped without
CUDA."""

import pytest
import torch

from norm_fusion_inductor import attention_ops
from norm_fusion_inductor.kernels import norm_attention

from .helpers import norm_attention_case, norm_attention_run, poison_allocator, rel_err

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
op = torch.ops.norm_fusion.norm_attention


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", list(norm_attention.ACTIVATIONS))
@pytest.mark.parametrize("heads,head_dim,kv_len,affine", [(4, 128, 128, True), (2, 64, 200, False),
                                                         (2, 128, 1000, True)])  # long KV: many KV blocks
def test_matches_float64(dtype, activation, heads, head_dim, kv_len, affine):
    _check_against_float64(dtype, activation, heads, head_dim, kv_len, affine)


@pytest.mark.parametrize("activation", ["softmax", "silu"])
@pytest.mark.parametrize("heads,head_dim,kv_len", [(4, 128, 128), (3, 64, 77)])
def test_separate_dq_hat_and_dkdv_match_float64(activation, heads, head_dim, kv_len, kernel_tuning):
    """dq̂ and dK/dV in their own kernels where every key fits one block (the merged kernel is the default
    there; KV > 128 always runs these two)."""
    kernel_tuning(attention_merged_dq_hat=False)
    _check_against_float64(torch.bfloat16, activation, heads, head_dim, kv_len, True)


@pytest.mark.parametrize("activation", ["silu", "gelu"])
@pytest.mark.parametrize("heads,head_dim,kv_len,config", [(4, 128, 128, None), (4, 128, 128, (64, 32, 4, 2)),
                                                          (2, 64, 200, None)])
def test_residual_in_accumulator_matches_float64(activation, heads, head_dim, kv_len, config, monkeypatch,
                                                 kernel_tuning):
    """RESIDUAL_IN_ACC (on by default): the forward's accumulator started at q̂, in the default config (64 × 32
    at D = 128, three programs per SM) and in the given one."""
    kernel_tuning(attention_residual_in_acc=True)
    if config is not None:
        monkeypatch.setattr(norm_attention, "default_config", lambda kv_len, head_dim, kernel="forward", *rest: (
            config if kernel == "forward" else _DEFAULT_CONFIG(kv_len, head_dim, kernel, *rest)))
    _check_against_float64(torch.bfloat16, activation, heads, head_dim, kv_len, True)


@pytest.mark.parametrize("activation", ["softmax", "silu"])
def test_cached_launches_read_their_own_operands(activation, kernel_tuning):
    """tuning.attention_cached_launch (on since timed): after a launch key's first call the compiled kernels are called
    directly; every call must still read its own operands and write its own poisoned outputs, and a batch of the
    same row count but another longest sequence (another grid) must get its own launch."""
    from norm_fusion_inductor.kernels import launch

    kernel_tuning(attention_cached_launch=True)
    launch.LAUNCHERS.clear()
    for seed, lens in enumerate(([300, 0, 1, 64, 129, 250, 77, 512], [300, 0, 1, 64, 129, 250, 77, 512],
                                 [200, 100, 100, 100, 129, 250, 200, 254])):  # 1333 rows each; longest 512, 254
        args, grad_out = norm_attention_case(lens, 4, 128, 128, activation, torch.bfloat16, device="cuda",
                                             affine=True, seed=seed)
        poison_allocator()
        out, stats, grads = norm_attention_run(op, args, grad_out)
        ref, _, ref_grads = norm_attention_run(attention_ops.norm_attention_reference, args, grad_out,
                                               cast=torch.float64)
        assert rel_err(out, ref) < 1e-2
        for i, (g, r) in enumerate(zip(grads, ref_grads)):
            assert rel_err(g, r) < 1e-2, f"grad {i}: {rel_err(g, r):.2e}"
    assert launch.LAUNCHERS  # the second batch went through the cached launchers


@pytest.mark.parametrize("activation", ["softmax", "silu"])
@pytest.mark.parametrize("heads,head_dim,kv_len", [(4, 128, 128), (2, 64, 200)])
def test_without_kv_gradients_matches_float64(activation, heads, head_dim, kv_len):
    """k and v that need no gradient: only the dq̂ kernel runs in the backward (no dK/dV)."""
    _check_against_float64(torch.bfloat16, activation, heads, head_dim, kv_len, True, frozen=("k", "v"))


_DEFAULT_CONFIG = norm_attention.default_config


def _check_against_float64(dtype, activation, heads, head_dim, kv_len, affine, frozen=()):
    lens = [300, 0, 1, 64, 129, 250, 77, 512]
    args, grad_out = norm_attention_case(lens, heads, head_dim, kv_len, activation, dtype, device="cuda",
                                         affine=affine, seed=heads + kv_len)
    poison_allocator()
    out, stats, grads = norm_attention_run(op, args, grad_out, frozen=frozen)
    ref, ref_stats, ref_grads = norm_attention_run(attention_ops.norm_attention_reference, args, grad_out,
                                                   cast=torch.float64, frozen=frozen)
    eager, _, eager_grads = norm_attention_run(attention_ops.norm_attention_reference, args, grad_out,
                                               frozen=frozen)
    assert not out.isnan().any()
    assert rel_err(out, ref) <= max(1e-2, 1.5 * rel_err(eager, ref)), \
        f"out {rel_err(out, ref):.2e} (eager {rel_err(eager, ref):.2e})"
    for name, s, r in zip(("mean", "rstd", "rrms", "lse", "x"), stats, ref_stats, strict=True):
        if s.numel():
            assert rel_err(s, r) < 1e-2, f"{name} {rel_err(s, r):.2e}"
    for i, (g, r, e) in enumerate(zip(grads, ref_grads, eager_grads)):
        assert not g.isnan().any(), f"grad {i}: NaN"
        assert rel_err(g, r) <= max(1e-2, 1.5 * rel_err(e, r)), \
            f"grad {i}: {rel_err(g, r):.2e} (eager {rel_err(e, r):.2e})"


@pytest.mark.parametrize("activation", ["softmax", "silu"])
def test_compiled_block_end_to_end(activation):
    """The eager block in a module, compiled with the plugin (policy always): rewritten, and outputs and
    gradients as close to float64 as eager bf16's."""
    import norm_fusion_inductor as nfi

    from .test_norm_attention import NormAttentionBlock

    torch._dynamo.reset()
    torch.manual_seed(0)
    block = NormAttentionBlock(width=512, heads=4, activation=activation).cuda()
    q = (torch.randn(8, 300, 512, device="cuda") + 0.3).requires_grad_()
    k, v = torch.randn(8, 128, 512, device="cuda"), torch.randn(8, 128, 512, device="cuda")
    ref64 = NormAttentionBlock(width=512, heads=4, activation=activation).cuda().double()
    ref64.load_state_dict(block.state_dict())
    block = block.bfloat16()
    inputs16 = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    inputs64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    before = len(nfi.reports())
    compiled = torch.compile(block, backend="norm_fusion", options={"norm_fusion": {"policy": "always"}})
    out = compiled(*inputs16)
    sites = [s for s in nfi.reports()[before:] if s.fusion == "norm_attention"]
    assert [s.rewritten for s in sites] == [True], [s.reason for s in sites]
    grad = torch.randn_like(out)
    grads = torch.autograd.grad(out, inputs16[:2], grad)
    eager = block(*[t.detach().requires_grad_() for t in inputs16])
    ref = ref64(*inputs64)
    ref_grads = torch.autograd.grad(ref, inputs64[:2], grad.double())
    assert rel_err(out, ref) <= max(1e-2, 1.5 * rel_err(eager, ref))
    for g, r in zip(grads, ref_grads):
        assert rel_err(g, r) < 2e-2


@pytest.mark.parametrize("train", [False, True])
def test_compiled_block_policy_auto_measures(train):
    """policy auto: the site is measured (forward, or forward + backward in training) and the reason says
    so; whatever the choice, the output matches eager."""
    import norm_fusion_inductor as nfi

    from .test_norm_attention import NormAttentionBlock

    torch._dynamo.reset()
    block = NormAttentionBlock(width=512, heads=4, activation="silu").cuda().bfloat16()
    q = torch.randn(16, 256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=train)
    k, v = (torch.randn(16, 128, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    before = len(nfi.reports())
    with torch.set_grad_enabled(train):
        out = torch.compile(block, backend="norm_fusion")(q, k, v)
    sites = [s for s in nfi.reports()[before:] if s.fusion == "norm_attention"]
    assert len(sites) == 1 and ("forward + backward" if train else "forward:") in sites[0].reason, sites
    assert rel_err(out, block(q, k, v)) < 2e-2


@pytest.mark.parametrize("activation", ["softmax", "silu"])
def test_descriptor_path_matches_pointer_path(activation):
    """The TMA (tensor-descriptor) loads against the validated pointer loads, same operands: forward and
    backward agree to rounding (the dots may tile differently)."""
    args, grad_out = norm_attention_case([300, 0, 1, 64, 129, 250, 77, 512], 4, 128, 128, activation,
                                         torch.bfloat16, device="cuda", seed=3)
    eps = dict(ln_eps=args.pop("ln_eps"), rms_eps=args.pop("rms_eps"))
    results = []
    for tma in (False, True):
        poison_allocator()
        outs = norm_attention.forward(**args, **eps, tma=tma)
        grads = norm_attention.backward(grad_out, *args.values(), *outs[1:], tma=tma)
        results.append([t for t in (*outs, *grads) if t is not None and t.numel()])
    for i, (a, b) in enumerate(zip(*results)):
        assert not b.isnan().any() and rel_err(b, a) < 1e-2, f"output {i}: {rel_err(b, a):.2e}"
