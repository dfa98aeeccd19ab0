"""GPU tests: the post-norm's direct launch (what Inductor's generated code launches) and the selection's child
process, on CUDA. Skipped without CUDA. The plugin runs the post-norm family alone ("matmul_norm"); its kernel
against float64 and the plugin end to end through both launches: test_gpu_post_norm.py; the regrouped rewrite of
the pre-norm sites: test_regrouped.py."""

import copy

import pytest
import torch
import torch.nn as nn

import norm_fusion_inductor as nfi
from norm_fusion_inductor.kernels import epilogue_gemm as eg

from .helpers import LlamaRMSNorm, poison_allocator, rel_err

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rms", "ln"])
@pytest.mark.parametrize("write_z", [False, True])
def test_direct_launch_writes_only_its_outputs(layer_norm, write_z):
    """Inductor's analysis of the kernel (TTIR) must see that it writes only y, rstd (mean, z): anything else
    marked as mutated would be copied before every launch (a full copy of x or of a residual)."""
    from norm_fusion_inductor import ops

    M, K, N = 4096, 1024, 256
    with torch._subclasses.FakeTensorMode():
        def make(*shape):
            return torch.empty(*shape, device="cuda", dtype=torch.bfloat16)

        args = (make(M, K), make(N, K), make(N), make(M, N), make(N), make(N) if layer_norm else None, 1e-5,
                layer_norm, False, write_z, make(M, N))
    written = {"out_ptr", "rstd_ptr"} | ({"mean_ptr"} if layer_norm else set()) | ({"aux_ptr"} if write_z else set())
    for cfg in eg._configs(args[0], eg.Epilogue(post_norm="ln" if layer_norm else "rms"), N)[:2]:
        gm = ops.trace_direct_launch(args, cfg)
        launches = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.triton_kernel_wrapper_functional]
        assert len(launches) == 1, gm.graph
        cloned = set(launches[0].kwargs["tensors_to_clone"])
        assert {"out_ptr", "rstd_ptr"} <= cloned <= written, (cfg, cloned)


class DenseNorm(nn.Module):
    """A post-norm block's output: norm(dense(h) + residual), then the next block's projection."""

    def __init__(self, norm, d, inner):
        super().__init__()
        self.dense = nn.Linear(inner, d)
        self.norm = LlamaRMSNorm(d) if norm == "rms" else nn.LayerNorm(d)
        self.up = nn.Linear(d, inner)

    def forward(self, h, residual):
        return self.up(self.norm(self.dense(h) + residual))


def _assert_grads_match(out, ref, inputs, inputs64, m, m64, eager_grads):
    """Backpropagate one random gradient through the compiled model and float64: input and parameter gradients
    within 1e-2 of float64, or 1.5x eager bf16's own error where that is larger (a bias gradient sums thousands
    of bf16 rows: eager is off by ~2 % there too). ``eager_grads(grad)``: eager's gradients, in the same order."""
    grad = torch.randn_like(out)
    out.backward(grad)
    ref.backward(grad.double())
    fused = [x.grad for x in inputs] + [p.grad for p in m.parameters()]
    exact = [x.grad for x in inputs64] + [p.grad for p in m64.parameters()]
    for f, e, r in zip(fused, eager_grads(grad), exact, strict=True):
        assert rel_err(f, r) <= max(1e-2, 1.5 * rel_err(e, r))


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("train", [False, True])
def test_direct_launch_end_to_end(norm, mode, train, monkeypatch, tmp_path):
    """The post-norm kernel launched from Inductor's generated code (no call of the fused op left), also under
    CUDA graphs; outputs and gradients against float64."""
    from torch._inductor.utils import run_and_get_code

    from norm_fusion_inductor import selection

    monkeypatch.setattr(selection, "_MEMORY", {})
    monkeypatch.setattr(eg, "_TUNED", {})
    torch.manual_seed(0)
    d, inner = 256, 768  # whole rows in a tile: N ≤ 256
    m = DenseNorm(norm, d, inner).cuda()
    with torch.no_grad():
        m.norm.weight.uniform_(0.5, 1.5)
    m64 = copy.deepcopy(m).double()
    m = m.bfloat16()
    h = torch.randn(4, 512, inner, device="cuda").bfloat16().requires_grad_(train)
    res = (torch.randn(4, 512, d, device="cuda") + 1).bfloat16().requires_grad_(train)
    h64, res64 = (t.detach().double().requires_grad_(train) for t in (h, res))
    nfi.clear_reports()
    options = {"norm_fusion": {"policy": "always", "fusions": ("matmul_norm",), "cache_dir": str(tmp_path)}}
    if mode == "reduce-overhead":  # torch.compile takes mode or options, not both
        options["triton.cudagraphs"] = True
    c = torch.compile(m, backend="norm_fusion", options=options)
    with torch.set_grad_enabled(train):
        _, code = run_and_get_code(c, h, res)
        for _ in range(2):  # CUDA graphs: the first call warms up, the second records, the third replays
            poison_allocator()
            out = c(h, res)
    assert [s.implementation for s in nfi.reports() if s.rewritten] == ["fused_triton (direct launch)"]
    forward_code = code[0]
    assert "epilogue_gemm_kernel" in forward_code
    assert "norm_fusion.linear_post_norm" not in forward_code
    ref = m64(h64, res64)
    assert rel_err(out, ref) < 1e-2
    if train:
        def eager_grads(grad):
            eager = copy.deepcopy(m)  # without the compiled run's gradients (deepcopy leaves .grad out)
            leaves = [t.detach().clone().requires_grad_() for t in (h, res)]
            eager(*leaves).backward(grad)
            return [t.grad for t in leaves] + [p.grad for p in eager.parameters()]

        _assert_grads_match(out, ref, (h, res), (h64, res64), m, m64, eager_grads)
    torch._dynamo.reset()


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_compiled_check_child_times_both_graphs(norm, tmp_path):
    """compiled_check's child process (measure_block.measure_matmul), for real: it compiles the site's subgraph
    both ways, the plugin's graph fuses the site (else it fails), and both times come back; its tuned config lands
    in the shared choice cache where the parent finds it."""
    from norm_fusion_inductor import selection

    site = selection.PostNormSite(M=16384, K=1024, N=256, dtype=torch.bfloat16,
                                  device=torch.device("cuda", torch.cuda.current_device()), has_norm_weight=True,
                                  has_bias=True, norm=norm, has_norm_bias=norm == "ln", has_residual=True)
    times = selection._measure_compiled_block(site, nfi.NormFusionConfig(cache_dir=str(tmp_path)))
    assert set(times) == {"fused_ms", "compiled_ms"} and all(0 < t < 100 for t in times.values()), times
    saved = (tmp_path / "choices.json").read_text()
    assert selection._key(site) + "|plan" in saved
