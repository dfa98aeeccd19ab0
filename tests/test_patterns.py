"""RMSNorm → matmul and LayerNorm → matmul (pre-norm) sites end to end on the CPU: every form real code writes,
dtypes, 2-D/3-D, bias, several consumers, inference and training; parity with eager and float64; negative cases that
must not be rewritten, with their reasons.

The pre-norm sites are matched by ``patterns/pre_norm.py`` and rewritten by regrouped normalization (fusion
"regrouped_norm", on by default): the norm goes into the epilogues of the GEMMs that read it
(``torch.ops.norm_fusion.epilogue_gemm`` / ``folded_epilogue_gemm``), which on the CPU run in the Triton interpreter
(bf16: the op's torch reference). So these tests check the matching, the graph rewrite and the numerics of the
rewritten graph; the epilogue kernel itself is tested in test_regrouped.py.
"""

import copy
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._inductor.custom_graph_pass import CustomGraphPass

import norm_fusion_inductor as nfi

from .helpers import OLDER_FUSIONS, GemmaRMSNorm, LlamaRMSNorm, T5LayerNorm, rel_err

FUSED_OP = "torch.ops.norm_fusion."  # any op of the plugin
# an epilogue GEMM (W·γ folded in the graph, or in the op: folded_epilogue_gemm); LayerNorm's bf16 sites also call
# norm_fusion.column_sums for the folded weight's column sums
EPILOGUE_GEMM = re.compile(r"target=torch\.ops\.norm_fusion\.(folded_)?epilogue_gemm\.default")
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


class FunctionalRMSNorm(nn.Module):
    def __init__(self, hidden):
        super().__init__()

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), None, 1e-6)


class Olmo2RMSNorm(nn.Module):
    """transformers' Olmo2RMSNorm: the weight applied before the downcast."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)


class CohereLayerNorm(nn.Module):
    """transformers' CohereLayerNorm: LayerNorm written out (the mean, then the variance of the centred values),
    the weight (no bias) applied in fp32."""

    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        mean = hidden_states.mean(-1, keepdim=True)
        variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
        hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight.to(torch.float32) * hidden_states
        return hidden_states.to(input_dtype)


FORMS = {
    "hf_llama": LlamaRMSNorm,
    "hf_llama_no_weight": lambda d: LlamaRMSNorm(d, weight=False),
    "t5": T5LayerNorm,
    "gemma": GemmaRMSNorm,
    "olmo2": Olmo2RMSNorm,
    "nn_rmsnorm": lambda d: nn.RMSNorm(d, eps=1e-5),
    "nn_rmsnorm_no_affine": lambda d: nn.RMSNorm(d, eps=1e-5, elementwise_affine=False),
    "f_rms_norm_no_weight": FunctionalRMSNorm,
    "nn_layernorm": lambda d: nn.LayerNorm(d, eps=1e-5),
    "nn_layernorm_no_bias": lambda d: nn.LayerNorm(d, bias=False),
    "nn_layernorm_no_affine": lambda d: nn.LayerNorm(d, elementwise_affine=False),
    "cohere_written_out": CohereLayerNorm,
}


class NormQKV(nn.Module):
    """One norm feeding three projections (q without bias, k/v with), as attention blocks do."""

    def __init__(self, norm, d=32):
        super().__init__()
        self.norm = norm
        self.q = nn.Linear(d, 16, bias=False)
        self.k = nn.Linear(d, 24)
        self.v = nn.Linear(d, 8)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h).sum(-1) + self.k(h).mean(-1) * self.v(h).amax(-1)


class Capture(CustomGraphPass):
    """Records each graph's text, and the nodes in it that apply a row statistic (rsqrt) to whole rows, i.e. that
    compute a normalized tensor: as joint_custom_post_pass (chained after ours) and post_grad_custom_post_pass."""

    def __init__(self):
        self.graphs, self.row_normalizing = [], []

    def __call__(self, graph):
        self.graphs.append(str(graph))
        self.row_normalizing.append(_row_normalizing_nodes(graph))

    def uuid(self):
        return None  # no caching: every test compiles


_VIEWS = {"reshape", "view", "_unsafe_view", "unsqueeze", "squeeze", "expand", "alias"}


def _row_normalizing_nodes(graph) -> list[str]:
    """Names of the aten nodes that read a row statistic (an rsqrt's output, through views) and write more elements
    than it has: the normalized tensor (x · rstd). A fused site's statistics reach only the fused ops (and
    per-row products, e.g. LayerNorm's −mean · rstd)."""
    found = []
    for rsqrt in graph.find_nodes(op="call_function", target=torch.ops.aten.rsqrt.default):
        rows = rsqrt.meta["val"].numel()
        stack, seen = list(rsqrt.users), set()
        while stack:
            user = stack.pop()
            if user in seen or user.op != "call_function" or not isinstance(user.target, torch._ops.OpOverload):
                continue
            seen.add(user)
            if user.target.namespace != "aten":  # the fused ops take rstd per row
                continue
            if user.target._opname in _VIEWS:
                stack.extend(user.users)
                continue
            val = user.meta.get("val")
            if isinstance(val, torch.Tensor) and val.numel() > rows:
                found.append(user.name)
    return found


def _init(model):
    torch.manual_seed(0)
    for p in model.parameters():
        if p.dim() == 1 and p.shape[0] == 32:
            p.data.uniform_(0.5, 1.5)  # norm weights away from 1
    return model


ALWAYS = {"norm_fusion": {"policy": "always"}}


def run(model, x, *, train, policy="always", options=None):
    """Compile with the backend (the default fusions, or ``options``), run (and backward), compare with eager and
    float64. Returns the site records, the joint graphs' Capture and the post-grad graphs' Capture (the forward
    graph first: ``_forward_graph``)."""
    torch._dynamo.reset()
    nfi.clear_reports()
    joint, post = Capture(), Capture()
    opts = {"norm_fusion": {"policy": policy, **(options or {})}}
    model64 = copy.deepcopy(model).double()
    model_eager = copy.deepcopy(model)  # the same weights in the same dtype: eager's own error bounds ours
    compiled = torch.compile(model, backend="norm_fusion", options=opts)
    with torch._inductor.config.patch(joint_custom_post_pass=joint, post_grad_custom_post_pass=post):
        if train:
            xg = x.clone().requires_grad_()
            out = compiled(xg)
            grad = torch.randn_like(out)
            out.backward(grad)
        else:
            with torch.no_grad():
                out = compiled(x)
    x64 = x.double().requires_grad_(train)
    ref64 = model64(x64)
    xe = x.clone().requires_grad_(train)
    eager = model_eager(xe)
    tol = TOL[x.dtype]
    assert rel_err(out, ref64) <= max(tol, 2 * rel_err(eager, ref64)), "output"
    if train:  # within twice the float64 tolerance, or twice eager's own error where that is larger (fp16)
        ref64.backward(grad.double())
        eager.backward(grad)
        assert rel_err(xg.grad, x64.grad) <= max(tol * 2, 2 * rel_err(xe.grad, x64.grad)), "input grad"
        for (name, p), p64, pe in zip(model.named_parameters(), model64.parameters(), model_eager.parameters()):
            assert rel_err(p.grad, p64.grad) <= max(tol * 2, 2 * rel_err(pe.grad, p64.grad)), f"grad of {name}"
    return nfi.reports(), joint, post


def _forward_graph(post: Capture) -> str:
    return post.graphs[0]  # post-grad passes see the forward graph first


def _normalized_in_forward(post: Capture) -> list[str]:
    """The forward graph's nodes that compute a normalized tensor (``_row_normalizing_nodes``)."""
    return post.row_normalizing[0]


def _epilogue_gemms(graph: str) -> int:
    return len(EPILOGUE_GEMM.findall(graph))


def _regrouped(sites) -> bool:
    """One site, rewritten by regrouped normalization."""
    return [(s.fusion, s.rewritten) for s in sites] == [("regrouped_norm", True)]


# fp16 and bf16 trace to the same graph (the same casts around the fp32 statistics): fp16 is matched in inference
# only, where a compile is cheap; training compiles (~10 s each here) run fp32 and bf16.
MODES_DTYPES = [(False, dt) for dt in (torch.float32, torch.float16, torch.bfloat16)] + [
    (True, dt) for dt in (torch.float32, torch.bfloat16)]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("train, dtype", MODES_DTYPES,
                         ids=[f"{'training' if t else 'inference'}-{str(d)[6:]}" for t, d in MODES_DTYPES])
def test_every_form_dtype_and_mode_is_fused(form, dtype, train):
    model = _init(NormQKV(FORMS[form](32))).to(dtype)
    x = torch.randn(2, 5, 32, dtype=dtype) * 2 + 1
    sites, _, post = run(model, x, train=train)
    assert _regrouped(sites), [s.line() for s in sites]
    assert sites[0].shape == (10, 32, 16) and "3 matmul(s) read the stream" in sites[0].reason, sites[0].line()
    fwd = _forward_graph(post)
    # every projection reads x through an epilogue GEMM; the normalized tensor is not computed in the forward
    assert _epilogue_gemms(fwd) == 3, fwd
    assert "aten.mm" not in fwd and "aten.addmm" not in fwd, fwd
    assert not _normalized_in_forward(post), fwd


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_2d_input_single_linear(bias, train):
    model = _init(nn.Sequential(LlamaRMSNorm(32), nn.Linear(32, 48, bias=bias)))
    sites, _, post = run(model, torch.randn(7, 32), train=train)
    assert _regrouped(sites), [s.line() for s in sites]
    assert sites[0].shape == (7, 32, 48)
    assert _epilogue_gemms(_forward_graph(post)) == 1 and not _normalized_in_forward(post)


class MatmulProjection(nn.Module):
    """`h @ W.T` written out instead of nn.Linear."""

    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(32)
        self.w = nn.Parameter(torch.randn(24, 32) / 32**0.5)

    def forward(self, x):
        return self.norm(x) @ self.w.t()


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_matmul_with_transposed_weight(train):
    sites, _, post = run(_init(MatmulProjection()), torch.randn(2, 6, 32), train=train)
    assert _regrouped(sites), [s.line() for s in sites]
    assert _epilogue_gemms(_forward_graph(post)) == 1 and not _normalized_in_forward(post)


class ScaledNormLinear(nn.Module):
    """T5's decoder end: the final norm times d_model^-0.5, then the (tied) lm_head."""

    def __init__(self, norm, scale):
        super().__init__()
        self.norm, self.scale = norm, scale
        self.head = nn.Linear(32, 24, bias=False)

    def forward(self, x):
        return self.head(self.norm(x) * self.scale)


@pytest.mark.parametrize("form", ["t5", "nn_layernorm", "nn_rmsnorm_no_affine"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_scalar_scale_between_norm_and_matmul_is_folded(form, dtype, train):
    model = _init(ScaledNormLinear(FORMS[form](32), 32**-0.5)).to(dtype)
    sites, _, post = run(model, torch.randn(2, 5, 32, dtype=dtype) + 0.5, train=train)
    assert _regrouped(sites), [s.line() for s in sites]
    fwd = _forward_graph(post)
    assert _epilogue_gemms(fwd) == 1 and "aten.mm" not in fwd and not _normalized_in_forward(post), fwd


def test_training_with_input_not_requiring_grad_and_inference_mode():
    model = _init(nn.Sequential(nn.RMSNorm(32), nn.Linear(32, 16)))
    x = torch.randn(3, 4, 32)
    torch._dynamo.reset()
    nfi.clear_reports()
    compiled = torch.compile(model, backend="norm_fusion", options=ALWAYS)
    out = compiled(x)  # weights require grad, the input does not
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, ref in zip(grads, [p.grad for p in model.parameters()]):
        assert rel_err(g, ref) < 1e-5
    with torch.inference_mode():
        assert rel_err(compiled(x), model(x)) < 1e-5
    sites = nfi.reports()
    assert [(s.fusion, s.rewritten) for s in sites] == [("regrouped_norm", True)] * 2, [s.line() for s in sites]


def test_dynamic_batch_and_sequence():
    """M symbolic (dynamic shapes: batch and sequence both): one compiled graph serves several batch × sequence
    sizes."""
    torch._dynamo.reset()
    nfi.clear_reports()
    model = _init(NormQKV(LlamaRMSNorm(32)))
    compiled = torch.compile(model, backend="norm_fusion", dynamic=True, options=ALWAYS)
    with torch.no_grad():
        for b, s in ((2, 5), (3, 7), (4, 11)):
            x = torch.randn(b, s, 32)
            assert rel_err(compiled(x), model(x)) < 1e-5
    sites = nfi.reports()
    assert _regrouped(sites) and "3 matmul(s)" in sites[0].reason, [s.line() for s in sites]  # compiled once
    torch._dynamo.reset()


class TransposedInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.proj = LlamaRMSNorm(32), nn.Linear(32, 16)

    def forward(self, x):  # x [B, 32, S]: the norm reads a transposed view
        return self.proj(self.norm(x.transpose(1, 2)))


def test_non_contiguous_norm_input_is_not_rewritten():
    sites, _, post = run(_init(TransposedInput()), torch.randn(2, 32, 6), train=False)
    assert not any(s.rewritten for s in sites), [s.line() for s in sites]
    assert any("not contiguous" in s.reason or "not row-major" in s.reason for s in sites), [s.line() for s in sites]
    assert FUSED_OP not in _forward_graph(post)


def test_any_eps_is_kept():
    """The norm's eps (any value) reaches the rewritten graph: small inputs, where eps matters, match float64."""
    for eps in (1e-2, 1e-8):
        norm = nn.RMSNorm(32, eps=eps)
        model = _init(nn.Sequential(norm, nn.Linear(32, 8, bias=False)))
        x = torch.randn(4, 32) * 0.05  # small values: eps matters
        sites, _, _ = run(model, x, train=False)
        assert _regrouped(sites), [s.line() for s in sites]


# --- negative cases --------------------------------------------------------------------------------------------

class NormAlsoReturned(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.proj = LlamaRMSNorm(32), nn.Linear(32, 16)

    def forward(self, x):
        h = self.norm(x)
        return torch.cat([self.proj(h), h], -1)  # the normalized tensor is part of the output anyway


class WrongDimNorm(nn.Module):
    """Looks like RMSNorm but reduces over the sequence dim."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(32))
        self.proj = nn.Linear(32, 16)

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(1, keepdim=True) + 1e-6)
        return self.proj(self.weight * h.to(x.dtype))


class NormIntoNonMatmul(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LlamaRMSNorm(32)

    def forward(self, x):
        return torch.tanh(self.norm(x))


def test_norm_output_also_returned_is_not_rewritten():
    sites, _, post = run(_init(NormAlsoReturned()), torch.randn(2, 3, 32), train=False)
    assert [(s.fusion, s.rewritten) for s in sites] == [("regrouped_norm", False)], [s.line() for s in sites]
    assert "also used by aten.cat" in sites[0].reason, sites[0].reason
    assert FUSED_OP not in _forward_graph(post)
    assert _normalized_in_forward(post)  # the check the fused tests rely on sees an unfused norm


def test_reduction_over_other_dim_is_not_rewritten():
    sites, _, post = run(_init(WrongDimNorm()), torch.randn(2, 3, 32), train=True)
    assert [(s.fusion, s.rewritten) for s in sites] == [("regrouped_norm", False)], [s.line() for s in sites]
    assert "not the last dim" in sites[0].reason
    assert FUSED_OP not in _forward_graph(post)


def test_norm_without_matmul_is_reported_once_not_rewritten():
    """No family takes it (the weighted and weightless forms both match it, and neither records it); the
    leftover scan reports it once, with what it feeds."""
    sites, _, post = run(_init(NormIntoNonMatmul()), torch.randn(2, 3, 32), train=False)
    assert [(s.fusion, s.rewritten) for s in sites] == [("standalone", False)], [s.line() for s in sites]
    assert "feeds no matmul or attention" in sites[0].reason
    assert FUSED_OP not in _forward_graph(post)


def test_policy_never_reports_but_does_not_rewrite():
    model = _init(NormQKV(LlamaRMSNorm(32)))
    sites, _, post = run(model, torch.randn(2, 5, 32), train=False, policy="never")
    assert [(s.fusion, s.rewritten, s.reason) for s in sites] == [("regrouped_norm", False, "policy=never")]
    assert FUSED_OP not in _forward_graph(post) and _normalized_in_forward(post)


def test_older_families_alone_leave_pre_norm_sites_to_the_leftover_scan():
    """With regrouped normalization off no family matches a pre-norm site any more: the leftover scan reports it
    once, naming the family that is off, and the graph is left as it was."""
    sites, _, post = run(_init(NormQKV(LlamaRMSNorm(32))), torch.randn(2, 5, 32), train=False,
                         options={"fusions": OLDER_FUSIONS})
    assert [(s.fusion, s.rewritten) for s in sites] == [("standalone", False)], [s.line() for s in sites]
    assert "feeds a matmul" in sites[0].reason and "regrouped_norm" in sites[0].reason, sites[0].reason
    assert FUSED_OP not in _forward_graph(post)


class _QKNormAttention(torch.nn.Module):
    """Per-head RMSNorm of q and k right before SDPA (QK-norm, Qwen3 style, but with no projection before it),
    and a norm that feeds nothing but a pointwise tail."""

    def __init__(self, width=32, heads=2):
        super().__init__()
        self.heads = heads
        self.q_norm, self.k_norm = torch.nn.RMSNorm(width // heads), torch.nn.RMSNorm(width // heads)
        self.tail_norm = torch.nn.RMSNorm(width)

    def forward(self, x):
        B, L, W = x.shape
        q = self.q_norm(x.view(B, L, self.heads, -1)).transpose(1, 2)
        k = self.k_norm((2 * x).view(B, L, self.heads, -1)).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, k.relu(), is_causal=True)
        return torch.tanh(self.tail_norm(a.transpose(1, 2).reshape(B, L, W)))


def test_norms_no_family_takes_are_reported_once_with_what_they_feed():
    """The two per-head norms are reported as QK-norms that no family took, with why: only the regrouped family
    fuses one (into a q/k projection's epilogue); with it off (the post-norm and attention families alone) the
    reason says so, and with it on (the default) there is no projection here to take them. The tail norm is
    reported as feeding no matmul or attention."""
    x = torch.randn(2, 8, 32)
    torch._dynamo.reset()
    result = nfi.explain(_QKNormAttention(), x, policy="always", fusions=OLDER_FUSIONS)
    kinds = sorted((s.fusion, s.rewritten) for s in result.sites)
    assert kinds == [("qk_norm", False), ("qk_norm", False), ("standalone", False)], result.table()
    qk = [s for s in result.sites if s.fusion == "qk_norm"]
    assert all("QK-norm" in s.reason and "'regrouped_norm'" in s.reason and "off" in s.reason
               and s.shape == (32, 16) for s in qk), result.table()
    torch._dynamo.reset()
    regrouped = nfi.explain(_QKNormAttention(), x, policy="always")
    qk = [s for s in regrouped.sites if s.fusion == "qk_norm"]
    assert len(qk) == 2 and all("QK-norm" in s.reason and "did not take it" in s.reason for s in qk), \
        regrouped.table()
    tail = next(s for s in result.sites if s.fusion == "standalone")
    assert "feeds no matmul or attention" in tail.reason and "tanh" in tail.reason


def test_traced_patterns_are_kept_on_disk_and_read_back(tmp_path, monkeypatch):
    """A norm form's trace is kept as Python code in the cache folder; a later process reads it back as the same
    pattern without tracing (tracing costs ~1.5 s per process); an unreadable entry is traced again."""
    from torch._inductor import pattern_matcher as pm

    from norm_fusion_inductor.patterns import tracing
    from norm_fusion_inductor.patterns.norm_forms import RMS_FORMS

    forms = {"hf_llama": RMS_FORMS["hf_llama"], "gemma": RMS_FORMS["gemma"]}
    monkeypatch.setattr(tracing, "_PATTERN_CODE", {})
    monkeypatch.setattr(tracing, "SHIPPED_TRACES", tmp_path / "none shipped")
    with tracing.pattern_cache_root(str(tmp_path)):
        traced = [(name, repr(p)) for name, p in tracing.traced_norm_forms(forms)]
        files = list((tmp_path / "patterns").glob("*.json"))
        assert len(files) == 1 and len(traced) == 4  # two forms, two dtype classes
        monkeypatch.setattr(tracing, "_PATTERN_CODE", {})  # a new process
        monkeypatch.setattr(pm, "gen_pattern", lambda *args, **kw: pytest.fail("traced again"))
        assert [(name, repr(p)) for name, p in tracing.traced_norm_forms(forms)] == traced
        monkeypatch.undo()
        monkeypatch.setattr(tracing, "_PATTERN_CODE", {})
        files[0].write_text(files[0].read_text().replace("CallFunction(", "NoSuchPattern("))
        assert [(name, repr(p)) for name, p in tracing.traced_norm_forms(forms)] == traced


def test_shipped_traces_are_what_tracing_gives(tmp_path, monkeypatch):
    """Each shipped traces file (patterns/traced/) was traced from the current pattern sources, and the running
    torch's holds exactly what tracing every pattern afresh gives, so a process reads them instead of tracing: after
    a change to patterns/norm_forms.py or patterns/tracing.py, run ``python -m norm_fusion_inductor trace-patterns``
    with each shipped torch."""
    import json
    import subprocess
    import sys

    from torch._inductor import pattern_matcher as pm

    from norm_fusion_inductor.patterns import tracing
    from norm_fusion_inductor.patterns.norm_forms import RMS_FORMS

    shipped = sorted(tracing.SHIPPED_TRACES.glob("torch-*.json"))
    assert tracing.shipped_traces_file() in shipped, f"no traces shipped for torch {torch.__version__}"
    for path in shipped:
        assert json.loads(path.read_text())["sources"] == tracing.pattern_sources_digest(), \
            f"{path.name} was traced from other pattern sources: run python -m norm_fusion_inductor trace-patterns"
    out = tmp_path / "fresh.json"
    subprocess.run([sys.executable, "-m", "norm_fusion_inductor", "trace-patterns", "--out", str(out)], check=True,
                   capture_output=True)
    assert json.loads(out.read_text())["patterns"] == json.loads(tracing.shipped_traces_file().read_text())["patterns"]
    monkeypatch.setattr(tracing, "_PATTERN_CODE", {})
    monkeypatch.setattr(pm, "gen_pattern", lambda *args, **kw: pytest.fail("traced, not read"))
    with tracing.pattern_cache_root(str(tmp_path / "empty cache")):
        assert len(tracing.traced_norm_forms({"hf_llama": RMS_FORMS["hf_llama"]})) == 2


def test_pass_reports_where_its_compile_time_went():
    """``explain`` returns the pass's seconds by phase (report.PHASES)."""
    result = nfi.explain(nn.Sequential(LlamaRMSNorm(32), nn.Linear(32, 32)), torch.randn(4, 32))
    assert result.pass_seconds.get("pass", 0) > 0 and set(result.pass_seconds) <= set(nfi.report.PHASES)
    assert nfi.report.format_seconds(result.pass_seconds).startswith("pass ")
