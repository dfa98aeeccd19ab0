"""The norm → attention → norm op (FlashNormAttention) on the CPU: its kernels under TRITON_INTERPRET=1 (fp32,
fp16) against float64 and against the eager block in the same dtype, forward and gradients; the reference path,
the fake implementation, the user-facing function and its errors."""


import pytest
import torch

import norm_fusion_inductor as nfi
from norm_fusion_inductor import attention_ops, flash_norm_attention
from norm_fusion_inductor.kernels import norm_attention

from .helpers import interpret_kernels, interpreter, norm_attention_case, norm_attention_run, record_kernel_calls, rel_err

op = torch.ops.norm_fusion.norm_attention
reference = attention_ops.norm_attention_reference


def _check_against_float64(args, grad_out, tol, frozen=()):
    """The op, the float64 reference and the eager reference in the operands' dtype: the op's error (outputs,
    statistics, every gradient) within ``tol`` or within twice the eager path's, whichever is larger. Inputs
    named in ``frozen`` need no gradient."""
    out, stats, grads = norm_attention_run(op, args, grad_out, frozen=frozen)
    ref, ref_stats, ref_grads = norm_attention_run(reference, args, grad_out, cast=torch.float64, frozen=frozen)
    eager, _, eager_grads = norm_attention_run(reference, args, grad_out, frozen=frozen)
    assert rel_err(out, ref) <= max(tol, 2 * rel_err(eager, ref)), f"out {rel_err(out, ref):.2e}"
    for name, s, r in zip(("mean", "rstd", "rrms", "lse", "x"), stats, ref_stats, strict=True):
        assert s.shape == r.shape, name
        if s.numel():
            assert rel_err(s, r) < max(tol, 1e-5), f"{name} {rel_err(s, r):.2e}"
    assert len(grads) == len(ref_grads)
    for i, (g, r, e) in enumerate(zip(grads, ref_grads, eager_grads)):
        assert rel_err(g, r) <= max(tol, 2 * rel_err(e, r)), f"grad {i}: {rel_err(g, r):.2e} (eager {rel_err(e, r):.2e})"


def _record_launch_flag(monkeypatch, kernel_name: str, flag: str) -> list:
    """The value of constexpr ``flag`` at each launch of the module's kernel ``kernel_name``, which still runs."""
    values = []
    real = getattr(norm_attention, kernel_name)

    class Recording:
        def __getitem__(self, grid):
            return lambda *a, **k: values.append(k[flag]) or real[grid](*a, **k)

    monkeypatch.setattr(norm_attention, kernel_name, Recording())
    return values


@interpreter
@pytest.mark.parametrize("activation", list(norm_attention.ACTIVATIONS))
@pytest.mark.parametrize("affine", [True, False])
def test_kernels_match_float64_fp32(activation, affine, monkeypatch):
    """Jagged rows with an empty sequence and sequences longer than a row block; KV longer than a KV block."""
    interpret_kernels(monkeypatch)
    args, grad_out = norm_attention_case([5, 0, 70, 20], heads=2, head_dim=16, kv_len=40, activation=activation,
                                         dtype=torch.float32, affine=affine, seed=len(activation) + affine)
    _check_against_float64(args, grad_out, tol=1e-5)


@interpreter
@pytest.mark.parametrize("activation", ["softmax", "gelu"])
def test_kernels_match_float64_long_kv(activation, monkeypatch):
    """KV far longer than a KV block (and not a multiple of it): the online softmax and every backward loop over
    many blocks."""
    interpret_kernels(monkeypatch)
    args, grad_out = norm_attention_case([7, 20], heads=2, head_dim=16, kv_len=300, activation=activation,
                                         dtype=torch.float32, seed=11)
    _check_against_float64(args, grad_out, tol=1e-5)


@interpreter
@pytest.mark.parametrize("activation", ["softmax", "relu2"])
def test_merged_backward_matches_float64(activation, monkeypatch, kernel_tuning):
    """The merged dq̂ + dK/dV kernel (one program per sequence and head over every key), with a KV length that
    is not a power of two and rows of several blocks."""
    interpret_kernels(monkeypatch)
    kernel_tuning(attention_merged_dq_hat=True)
    calls = _record_launch_flag(monkeypatch, "_dkdv_kernel", "WITH_DQ_HAT")
    args, grad_out = norm_attention_case([5, 0, 70, 20], heads=2, head_dim=16, kv_len=40, activation=activation,
                                         dtype=torch.float32, seed=21)
    _check_against_float64(args, grad_out, tol=1e-5)
    assert calls == [True]


@interpreter
@pytest.mark.parametrize("activation", ["softmax", "silu"])
def test_backward_without_kv_gradients(activation, monkeypatch):
    """k and v that need no gradient (keys fed without grad): the dK/dV kernel does not run, dq̂ comes from its
    own kernel, and dq and the weights' gradients match float64."""
    interpret_kernels(monkeypatch)
    dkdv_launches = _record_launch_flag(monkeypatch, "_dkdv_kernel", "WITH_DQ_HAT")
    dq_hat_launches = _record_launch_flag(monkeypatch, "_dq_hat_kernel", "ACT")
    args, grad_out = norm_attention_case([5, 0, 70, 20], heads=2, head_dim=16, kv_len=40, activation=activation,
                                         dtype=torch.float32, seed=41)
    _check_against_float64(args, grad_out, tol=1e-5, frozen=("k", "v"))
    assert dkdv_launches == [] and len(dq_hat_launches) == 1


@interpreter
@pytest.mark.parametrize("activation", ["softmax", "silu"])
def test_cached_launches_get_every_constexpr_and_their_grid(activation, monkeypatch):
    """Through the cached launcher (kernels.launch.cached_launch, GPU only: replaced here by a recorder that runs
    the kernel) every launch passes each constexpr by name, defaults included, and its grid as part of the key
    (two jagged batches of the same row count but different longest sequences launch different grids)."""
    from norm_fusion_inductor.kernels import launch

    interpret_kernels(monkeypatch)
    monkeypatch.setattr(norm_attention, "_cached_launch_on", lambda device: True)
    launches = []

    def recording(kernel, grid, args, meta, device, key_extra=()):
        missing = [name for name in kernel.arg_names[len(args):] if name not in meta]
        launches.append((kernel.fn.__name__, grid(), key_extra, missing))
        kernel[grid()](*args, **meta)

    monkeypatch.setattr(launch, "cached_launch", recording)
    for lens in ([5, 0, 70, 20], [40, 15, 20, 20]):  # 95 rows each, longest 70 and 40
        args, grad_out = norm_attention_case(lens, heads=2, head_dim=16, kv_len=40, activation=activation,
                                             dtype=torch.float32, seed=51)
        _check_against_float64(args, grad_out, tol=1e-5)
    names = {name for name, *_ in launches}
    assert {"_ln_stats_kernel", "_attention_kernel", "_rms_out_kernel", "_ln_backward_kernel"} <= names
    assert all(grid == key and not missing for _, grid, key, missing in launches)
    grids = [grid for name, grid, *_ in launches if name == "_attention_kernel"]
    assert len(set(grids)) == 2


@interpreter
@pytest.mark.parametrize("activation, dtype, tol", [("silu", torch.float32, 1e-5), ("gelu_tanh", torch.float16, 2e-3),
                                                    ("softmax", torch.float32, 1e-5)])
def test_residual_in_the_accumulator_matches_float64(activation, dtype, tol, monkeypatch, kernel_tuning):
    """RESIDUAL_IN_ACC (the forward's accumulator started at q̂; softmax keeps the separate add), KV over several
    blocks, fp32 and fp16, forward and gradients."""
    interpret_kernels(monkeypatch)
    kernel_tuning(attention_residual_in_acc=True)
    flags = _record_launch_flag(monkeypatch, "_attention_kernel", "RESIDUAL_IN_ACC")
    args, grad_out = norm_attention_case([5, 0, 70, 20], heads=2, head_dim=16, kv_len=40, activation=activation,
                                         dtype=dtype, seed=31)
    _check_against_float64(args, grad_out, tol=tol)
    assert flags and all(f == (activation != "softmax") for f in flags)


@interpreter
def test_kernels_match_float64_three_heads(monkeypatch):
    """A head count that is not a power of two: the row kernels hold whole rows padded to a power of two and sum
    per-head partials (Δ) over the padded layout."""
    interpret_kernels(monkeypatch)
    args, grad_out = norm_attention_case([40, 3, 29], heads=3, head_dim=16, kv_len=24, activation="softmax",
                                         dtype=torch.float32, seed=13)
    _check_against_float64(args, grad_out, tol=1e-5)


@interpreter
@pytest.mark.parametrize("activation", ["softmax", "silu"])
def test_kernels_match_float64_fp16(activation, monkeypatch):
    interpret_kernels(monkeypatch)
    args, grad_out = norm_attention_case([33, 16, 7], heads=4, head_dim=16, kv_len=24, activation=activation,
                                         dtype=torch.float16, seed=3)
    _check_against_float64(args, grad_out, tol=2e-3)


@interpreter
@pytest.mark.parametrize("activation", ["softmax", "gelu"])
def test_pointer_and_descriptor_paths_agree(activation):
    """The kernels read through tensor descriptors (TMA) wherever the operands allow, else through pointers;
    both paths compute the same values (rows past a sequence's end, and past the last row, read as zero)."""
    args, grad_out = norm_attention_case([3, 0, 70, 21], heads=2, head_dim=16, kv_len=20, activation=activation,
                                         dtype=torch.float32, seed=11)
    eps = dict(ln_eps=args.pop("ln_eps"), rms_eps=args.pop("rms_eps"))
    results = []
    for tma in (False, True):
        outs = norm_attention.forward(**args, **eps, tma=tma)
        grads = norm_attention.backward(grad_out, *args.values(), *outs[1:], tma=tma)
        results.append([t for t in (*outs, *grads) if t is not None])
    for a, b in zip(*results):
        assert torch.equal(a, b)


@interpreter
def test_kernels_far_from_zero_mean(monkeypatch):
    """Rows whose mean is 100× their std: the LayerNorm statistics are two-pass, nothing cancels."""
    interpret_kernels(monkeypatch)
    args, grad_out = norm_attention_case([20, 9], heads=2, head_dim=16, kv_len=16, activation="gelu",
                                         dtype=torch.float32, mean_shift=200.0, seed=5)
    _check_against_float64(args, grad_out, tol=1e-5)


@interpreter
def test_kernels_write_every_output(monkeypatch):
    """Every buffer the kernels allocate starts as NaN: outputs and gradients must be written everywhere."""
    interpret_kernels(monkeypatch)
    args, grad_out = norm_attention_case([3, 0, 66], heads=2, head_dim=16, kv_len=20, activation="softmax",
                                         dtype=torch.float32, seed=7)
    real_empty, real_empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: real_empty_like(*a, **k).fill_(float("nan")))
    out, stats, grads = norm_attention_run(op, args, grad_out)
    for t in (out, *stats, *grads):
        assert not t.isnan().any()


def _count_kernel_calls(monkeypatch) -> list:
    return record_kernel_calls(monkeypatch, norm_attention)


@interpreter
def test_op_uses_the_kernels_under_interpreter(monkeypatch):
    calls = _count_kernel_calls(monkeypatch)
    args, grad_out = norm_attention_case([9, 4], heads=2, head_dim=16, kv_len=16, activation="relu2",
                                         dtype=torch.float32)
    norm_attention_run(op, args, grad_out)
    assert calls == ["forward", "backward"]


def test_reference_path_gradcheck():
    """Without the interpreter the op runs the reference; its autograd differentiates the recomputed reference."""
    args, _ = norm_attention_case([3, 2], heads=2, head_dim=4, kv_len=5, activation="gelu_tanh",
                                  dtype=torch.float64)
    names = ("q", "k", "v", "ln_weight", "ln_bias", "rms_weight")

    def fn(*tensors):
        return op(**{**args, **dict(zip(names, tensors))})[0]

    inputs = [args[n].clone().requires_grad_() for n in names]
    assert torch.autograd.gradcheck(fn, inputs)


def test_fake_and_opcheck():
    args, _ = norm_attention_case([3, 5], heads=2, head_dim=4, kv_len=6, activation="softmax",
                                  dtype=torch.float32)
    torch.library.opcheck(op, tuple(args.values()),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@interpreter
def test_backward_op_fake_and_opcheck(monkeypatch):
    """The backward op (what AOTAutograd traces) against its fake implementation, with the kernels."""
    interpret_kernels(monkeypatch)
    args, grad_out = norm_attention_case([3, 5], heads=2, head_dim=16, kv_len=6, activation="softmax",
                                         dtype=torch.float32)
    stats = op(**args)[1:]
    torch.library.opcheck(torch.ops.norm_fusion.norm_attention_backward, (grad_out, *args.values(), *stats),
                          test_utils=("test_schema", "test_faketensor"))


def test_dense_function_matches_eager_block():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 7, 32), torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    w = torch.rand(32) + 0.5
    for activation in ("softmax", "silu"):
        out = flash_norm_attention(q, k, v, heads=4, ln_weight=w, rms_weight=w, activation=activation)
        scale = 8 ** -0.5 if activation == "softmax" else 1 / 5
        ref = attention_ops.norm_attention_block(q, k, v, 4, w, None, w, scale, activation)
        assert out.shape == q.shape and rel_err(out, ref) < 1e-6


def test_function_errors_name_the_argument():
    q, k = torch.randn(2, 7, 32), torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="activation 'tanh'"):
        flash_norm_attention(q, k, k, heads=4, activation="tanh")
    with pytest.raises(ValueError, match="dense q must be"):
        flash_norm_attention(q[0], k, k, heads=4)


def test_unsupported_operands_have_reasons():
    q, k = torch.randn(10, 48), torch.randn(2, 5, 48)
    assert "head_dim 12" in norm_attention.unsupported_reason(q, k, k, 4, "softmax")
    assert "empty KV" in norm_attention.unsupported_reason(q[:, :32], torch.randn(2, 0, 32), torch.randn(2, 0, 32),
                                                           2, "softmax")
    huge = torch.empty(2**31 // 32 + 1, 32, device="meta")
    assert "int32" in norm_attention.unsupported_reason(huge, k[..., :32], k[..., :32], 2, "softmax")
    many = torch.empty(32768, 1, 32, device="meta")  # 32768 sequences × 2 heads: past a CUDA grid axis
    assert "grid axis" in norm_attention.unsupported_reason(q[:, :32], many, many, 2, "softmax")
    assert norm_attention.unsupported_reason(q[:, :32], k[..., :32], k[..., :32], 2, "softmax") is None


@interpreter
def test_merged_backward_needs_every_key_in_its_block(monkeypatch):
    interpret_kernels(monkeypatch)
    args, grad_out = norm_attention_case([5, 9], heads=2, head_dim=16, kv_len=40, activation="softmax",
                                         dtype=torch.float32, seed=2)
    eps = dict(ln_eps=args.pop("ln_eps"), rms_eps=args.pop("rms_eps"))
    outs = norm_attention.forward(**args, **eps)
    with pytest.raises(ValueError, match="BLOCK_N must be at least kv_len 40"):
        norm_attention.backward(grad_out, *args.values(), *outs[1:], merged=True, merged_config=(16, 16, 1, 1))


# --- the pattern: the eager block in a model, compiled --------------------------------------------------------------

class NormAttentionBlock(torch.nn.Module):
    """The block as model code writes it: nn.LayerNorm, heads by view/transpose, SDPA or act(q kᵀ)·s @ v,
    the inner residual, nn.RMSNorm, the outer residual. ``variant`` bends it in ways the pattern must follow or
    must refuse."""

    def __init__(self, width=32, heads=2, activation="softmax", variant=""):
        super().__init__()
        self.ln, self.rms = torch.nn.LayerNorm(width), torch.nn.RMSNorm(width)
        self.heads, self.activation, self.variant = heads, activation, variant
        self.extra = None

    def forward(self, q, k, v):
        B, L, W = q.shape
        D = W // self.heads
        q_hat = self.ln(q)
        if self.variant == "permute":
            qh = q_hat.reshape(B, L, self.heads, D).permute(0, 2, 1, 3)
        else:
            qh = q_hat.view(B, L, self.heads, D).transpose(1, 2)
        kh = k.view(B, -1, self.heads, D).transpose(1, 2)
        vh = v.view(B, -1, self.heads, D).transpose(1, 2)
        if self.activation == "softmax":
            a = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=self.variant == "causal")
        elif self.activation == "tanh":
            a = torch.tanh(qh @ kh.transpose(-2, -1)) @ vh
        else:
            act = attention_ops.ACTIVATION_FNS[self.activation]
            if self.variant == "scale_after":
                a = (act(qh @ kh.transpose(-2, -1)) @ vh) * 0.25
            else:
                a = act(qh @ kh.transpose(-2, -1)) / k.shape[1] @ vh
        x = a.transpose(1, 2).contiguous().view(B, L, W)
        x = q_hat + x if self.variant == "permute" else x + q_hat
        out = self.rms(x) + q
        if self.variant == "leak":
            return out, q_hat  # the normalized q is read outside the block
        return out


def _compile_block(block, q, k, v, policy="always"):
    torch._dynamo.reset()  # Dynamo would reuse a graph compiled for an equal block: the pass would not run
    nfi_reports_before = len(nfi.reports())
    compiled = torch.compile(block, backend="norm_fusion",
                             options={"norm_fusion": {"policy": policy, "fusions": ("norm_attention",)}})
    out = compiled(q, k, v)
    return out, [r for r in nfi.reports()[nfi_reports_before:] if r.fusion == "norm_attention"]


def _block_operands(seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(2, 9, 32, generator=g) + 0.5).requires_grad_()
    return q, torch.randn(2, 6, 32, generator=g).requires_grad_(), torch.randn(2, 6, 32, generator=g)


@pytest.mark.parametrize("activation,variant", [("softmax", ""), ("silu", ""), ("gelu_tanh", "scale_after"),
                                                ("relu2", "permute"), ("gelu", "")])
def test_block_rewritten_training_matches_eager(activation, variant):
    torch.manual_seed(1)
    block = NormAttentionBlock(activation=activation, variant=variant)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    q, k, v = _block_operands()
    ref = block(q, k, v)
    ref_grads = torch.autograd.grad(ref.square().sum(), [q, k, *block.parameters()])
    out, sites = _compile_block(block, q, k, v)
    grads = torch.autograd.grad(out.square().sum(), [q, k, *block.parameters()])
    assert [s.rewritten for s in sites] == [True], [s.reason for s in sites]
    assert sites[0].pattern == f"{activation} attention" and sites[0].shape == (2, 9, 6, 2, 16)
    assert rel_err(out, ref) < 1e-5
    for g, r in zip(grads, ref_grads):
        assert rel_err(g, r) < 1e-5


@interpreter
def test_block_compiled_runs_the_kernels(monkeypatch):
    """Under the interpreter the compiled graph calls the op, whose kernels run forward and backward."""
    calls = _count_kernel_calls(monkeypatch)
    block = NormAttentionBlock(activation="silu")
    q, k, v = _block_operands(seed=2)
    ref = block(q, k, v)
    out, sites = _compile_block(block, q, k, v)
    out.backward(torch.ones_like(out))
    assert sites[0].rewritten and calls == ["forward", "backward"]
    assert rel_err(out, ref) < 1e-5


@interpreter
def test_block_compiled_without_kv_gradients(monkeypatch):
    """k and v that need no gradient: the compiled graph's backward asks the kernels for no dK/dV, and q's and
    the weights' gradients still match eager."""
    kv_grad_flags = []
    real = norm_attention.backward
    interpret_kernels(monkeypatch)
    monkeypatch.setattr(norm_attention, "backward",
                        lambda *a, **kw: kv_grad_flags.append(kw.get("kv_grad", True)) or real(*a, **kw))
    block = NormAttentionBlock(activation="softmax")
    q, k, v = _block_operands(seed=3)
    k = k.detach()
    ref = block(q, k, v)
    ref_grads = torch.autograd.grad(ref.square().sum(), [q, *block.parameters()])
    out, sites = _compile_block(block, q, k, v)
    grads = torch.autograd.grad(out.square().sum(), [q, *block.parameters()])
    assert sites[0].rewritten and kv_grad_flags == [False]
    for g, r in zip(grads, ref_grads):
        assert rel_err(g, r) < 1e-5


@pytest.mark.parametrize("activation,variant,reason", [
    ("softmax", "causal", "causal"),
    ("tanh", "", "no supported activation"),
    ("silu", "leak", "another reader"),
])
def test_block_not_rewritten_says_why(activation, variant, reason):
    block = NormAttentionBlock(activation=activation, variant=variant)
    q, k, v = _block_operands()
    out, sites = _compile_block(block, q, k, v)
    ref = block(q, k, v)
    assert len(sites) == 1 and not sites[0].rewritten and reason in sites[0].reason
    out, ref = (out[0], ref[0]) if isinstance(out, tuple) else (out, ref)
    assert rel_err(out, ref) < 1e-5


def test_block_policy_auto_on_cpu_keeps_the_unfused_path():
    block = NormAttentionBlock()
    out, sites = _compile_block(block, *_block_operands(), policy="auto")
    assert not sites[0].rewritten and "no fused kernel for device 'cpu'" in sites[0].reason
