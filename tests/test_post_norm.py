"""matmul → norm (post-norm) end to end on the CPU: the block forms real models write (BERT's output sublayer,
a sublayer post-norm, the residual stream of a pre-norm LLM), inference and training, parity with eager and
float64 (``test_patterns.run``), z written only when something else reads it, negative cases.

The CPU runs the op's reference implementation (policy "always"); the kernel (``kernels/epilogue_gemm.py``'s
post-norm epilogue) is tested in test_kernel_interpreter.py and test_gpu_post_norm.py."""

import pytest
import torch
import torch.nn as nn

import norm_fusion_inductor as nfi

from .helpers import LlamaRMSNorm
from .test_patterns import _forward_graph, _init, run

POST_OP = "torch.ops.norm_fusion.linear_post_norm"


class BertOutput(nn.Module):
    """transformers' BertSelfOutput/BertOutput: LayerNorm(dense(h) + input); its output feeds a linear and the
    next residual."""

    def __init__(self, d=32, inner=48, norm=None):
        super().__init__()
        self.dense = nn.Linear(inner, d)
        self.norm = norm or nn.LayerNorm(d, eps=1e-12)
        self.up = nn.Linear(d, inner)

    def forward(self, h):
        residual = h[..., :32] * 0.5
        y = self.norm(self.dense(h) + residual)
        return self.up(y) + y.sum(-1, keepdim=True)


class SublayerPostNorm(nn.Module):
    """x + norm(o_proj(a)) (Gemma 2, OLMo 2): no residual inside the norm."""

    def __init__(self, d=32, norm=None):
        super().__init__()
        self.o = nn.Linear(d, d, bias=False)
        self.norm = norm or LlamaRMSNorm(d)

    def forward(self, x):
        return x + self.norm(self.o(torch.tanh(x)))


class ResidualStream(nn.Module):
    """A pre-norm LLM's residual add after a projection: h = x + o(a) feeds the norm and the next residual, so z
    is written too."""

    def __init__(self, d=32):
        super().__init__()
        self.o = nn.Linear(d, d, bias=False)
        self.norm = LlamaRMSNorm(d)
        self.up = nn.Linear(d, 24, bias=False)

    def forward(self, x):
        h = x + self.o(torch.tanh(x))
        return self.up(self.norm(h)).sum(-1) + h.sum(-1)


NORMS = {
    "layernorm": lambda d: nn.LayerNorm(d, eps=1e-5),
    "layernorm_no_affine": lambda d: nn.LayerNorm(d, elementwise_affine=False),
    "hf_llama_rms": LlamaRMSNorm,
    "nn_rmsnorm": lambda d: nn.RMSNorm(d, eps=1e-5),
}
POST_ONLY = {"fusions": ("matmul_norm",)}


def _post_sites(sites):
    return [s for s in sites if s.fusion == "matmul_norm"]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_bert_output_block_is_fused(norm, dtype, train):
    model = _init(BertOutput(norm=NORMS[norm](32))).to(dtype)
    sites, _, post = run(model, torch.randn(2, 5, 48, dtype=dtype), train=train)
    fused = [s for s in _post_sites(sites) if s.rewritten]
    assert len(fused) == 1 and fused[0].shape == (10, 48, 32), [s.line() for s in sites]
    assert fused[0].kind.startswith("post-norm")
    fwd = _forward_graph(post)
    assert fwd.count(POST_OP) == 1
    # the norm's output is only read by the fused op's consumers: no LayerNorm/RMSNorm reduction in the forward
    assert "aten.var_mean" not in fwd and "aten.pow" not in fwd, fwd
    # z is written only for the backward
    assert ("(z written)" in fused[0].reason) == train


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_sublayer_post_norm_with_the_residual_after_it(train):
    """x + norm(o(a)): the add after the norm goes into the epilogue too."""
    sites, _, post = run(_init(SublayerPostNorm()), torch.randn(3, 4, 32), train=train, options=POST_ONLY)
    site, = _post_sites(sites)
    assert site.rewritten and "the residual add after it" in site.reason
    fwd = _forward_graph(post)
    assert fwd.count(POST_OP) == 1 and "aten.add" not in fwd, fwd


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_residual_stream_writes_z(train):
    """Post-norm only (the pre-norm family would otherwise take this norm into the `up` projection)."""
    sites, _, post = run(_init(ResidualStream()), torch.randn(2, 5, 32), train=train, options=POST_ONLY)
    site, = _post_sites(sites)
    assert site.rewritten and "(z written)" in site.reason
    assert _forward_graph(post).count(POST_OP) == 1


def test_pre_norm_family_takes_the_norm_first():
    """Both fusions apply to h = x + o(a) → norm → up: the pre-norm sites go first, to regrouped normalization,
    which also links o (the GEMM producing the stream h); the post-norm family leaves the norm. One record."""
    sites, _, post = run(_init(ResidualStream()), torch.randn(2, 5, 32), train=False)
    assert [(s.fusion, s.rewritten) for s in sites] == [("regrouped_norm", True)], [s.line() for s in sites]
    assert "producer GEMM writes the stream" in sites[0].reason, sites[0].reason
    assert POST_OP not in _forward_graph(post)


class MatmulOutputReadTwice(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.o = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        z = self.o(x)
        return self.norm(z + x) + z.amax(-1, keepdim=True)


class NormOverOtherDim(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.o = nn.Linear(d, d)

    def forward(self, x):
        z = self.o(x)
        return z * torch.rsqrt(z.pow(2).mean(1, keepdim=True) + 1e-6)


def test_negative_cases_are_explained():
    sites, _, post = run(_init(MatmulOutputReadTwice()), torch.randn(2, 5, 32), train=False, options=POST_ONLY)
    site, = _post_sites(sites)
    assert not site.rewritten and "matmul's output is also used by" in site.reason
    sites, _, post = run(_init(NormOverOtherDim()), torch.randn(2, 5, 32), train=False, options=POST_ONLY)
    site, = _post_sites(sites)
    assert not site.rewritten and "not the last dim" in site.reason
    assert POST_OP not in _forward_graph(post)


def test_one_record_per_norm():
    """BERT's norm is both after a matmul and before one: the pre-norm matchers (regrouped normalization) and the
    post-norm family both see it, the report has one record with both reasons."""
    sites, _, post = run(_init(BertOutput()), torch.randn(2, 5, 48), train=False, policy="never")
    site, = sites
    assert not site.rewritten
    assert site.reason == ("norm in the epilogues of the GEMMs around it: the normalized tensor is also used by "
                           "aten.sum.dim_IntList, so it would still be written; post-norm matmul → LayerNorm: "
                           "policy=never"), site.reason
    assert POST_OP not in _forward_graph(post)
    assert "matmul_norm" in nfi.FUSIONS


def test_dynamic_shapes_take_the_op_with_eps_as_a_tensor():
    """dynamic=True: eps arrives as a graph input for HF-style norms; the post-norm site runs the tensor-eps op."""
    from .helpers import rel_err

    torch.manual_seed(0)
    model = _init(SublayerPostNorm())
    torch._dynamo.reset()
    nfi.clear_reports()
    compiled = torch.compile(model, backend="norm_fusion", dynamic=True,
                             options={"norm_fusion": {"policy": "always", "fusions": ("matmul_norm",)}})
    for batch in (2, 3, 5):
        x = torch.randn(batch, 7, 32)
        assert rel_err(compiled(x), model(x)) < 1e-5
    assert [s.rewritten for s in nfi.reports()] == [True]
    torch._dynamo.reset()
