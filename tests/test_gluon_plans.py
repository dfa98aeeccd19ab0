"""Which plans run on the Gluon mainloop (kernels/norm_gemm_gluon.py), decided on the host: no GPU needed. The
kernel itself is compiled for sm_90 by test_sm90_compile.py and checked against float64 by the GPU tests."""

import types

import pytest
import torch
import triton

from norm_fusion_inductor.kernels import launch, norm_gemm, norm_gemm_gluon


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    return torch.device("cuda", 0)


def _x(device, K, dtype=torch.bfloat16):
    return types.SimpleNamespace(is_cuda=True, dtype=dtype, shape=(4096, K), device=device)


def test_gluon_plans_offered_for_16_bit_inputs_on_sm90(sm90):
    plans = norm_gemm._candidate_plans(_x(sm90, 1024))
    gluon = [p for p in plans if p.gluon]
    assert {p[0] for p in gluon} == {"gluon_in_loop", "gluon_pre_pass"}
    assert len(gluon) == 2 * len(norm_gemm_gluon.CONFIGS + norm_gemm_gluon.OFFERED_WS)
    assert [p[1] for p in gluon if p[1].get("warp_specialize")] == 2 * norm_gemm_gluon.OFFERED_WS
    assert len(plans) == len(gluon) + 2 * len(norm_gemm._GPU_CONFIGS)  # the Triton mainloop's plans stay


@pytest.mark.parametrize("dtype,K,w_kn,center,reason", [
    (torch.float32, 1024, False, False, "16-bit"),
    (torch.bfloat16, 64, False, False, "fill"),  # one K step: the 3-stage pipeline has nothing to prefetch
])
def test_gluon_plans_left_out(sm90, dtype, K, w_kn, center, reason):
    plans = norm_gemm._candidate_plans(_x(sm90, K, dtype), center=center, w_kn=w_kn)
    assert not [p for p in plans if p.gluon]
    cfg = norm_gemm_gluon.CONFIGS[0]
    assert reason in norm_gemm_gluon.unsupported_reason(dtype, sm90, K, cfg, "in_loop", center, w_kn)


def test_gluon_plans_take_the_weight_stored_k_n(sm90):
    """GPT-2's Conv1D weight [K, N]: the same Gluon plans as [N, K] (checked on the H200 by gluon_probe.py --w-kn)."""
    def gluon(w_kn):
        return [p for p in norm_gemm._candidate_plans(_x(sm90, 1024), w_kn=w_kn) if p.gluon]
    assert gluon(True) and gluon(True) == gluon(False)


def test_gluon_layer_norm_in_loop_needs_whole_k_tiles(sm90):
    """The shifted sums read the TMA zero padding as x = 0, i.e. −s: the in-loop LayerNorm plan needs
    K % BLOCK_K == 0; its pre-pass plan and RMSNorm do not."""
    names = {p[0] for p in norm_gemm._candidate_plans(_x(sm90, 1000), center=True) if p[0].startswith("gluon")}
    assert names == {"gluon_pre_pass"}
    names = {p[0] for p in norm_gemm._candidate_plans(_x(sm90, 1000)) if p[0].startswith("gluon")}
    assert names == {"gluon_in_loop", "gluon_pre_pass"}


def test_no_gluon_plans_off_sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    plans = norm_gemm._candidate_plans(_x(torch.device("cuda", 0), 1024))
    assert plans and not [p for p in plans if p.gluon]



class _FakeCompiled:
    function, packed_metadata = "function", "metadata"

    def __init__(self, log):
        self.log = log

    def run(self, *launch):  # grid x, y, z, stream, function, metadata, launch metadata, hooks, then the kernel's
        self.log.append(("compiled", launch[:3], launch[9:], launch[3]))


class _FakeKernel:
    """Stands in for the Gluon JIT function: records whether a launch went through the JIT or the cache."""
    arg_names = ["a_ptr", "n", "eps", "BLOCK", "num_warps"]

    def __init__(self):
        self.log = []

    def __getitem__(self, grid):
        def jit(*args, **meta):
            self.log.append(("jit", grid, args, meta))
            return _FakeCompiled(self.log)
        return jit


@pytest.fixture
def fake_cuda_launch(monkeypatch):
    import contextlib

    monkeypatch.setattr(launch, "LAUNCHERS", {})
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    return torch.device("cuda", 0)


def test_repeated_launch_skips_the_jit_until_the_specialization_changes(fake_cuda_launch):
    kernel, buf = _FakeKernel(), torch.zeros(64, dtype=torch.float16)
    meta = dict(BLOCK=64, num_warps=4)

    def launch(a, n=32, eps=1e-6):
        norm_gemm_gluon._cached_launch(kernel, lambda: (8, 1, 1), (a, n, eps), meta, fake_cuda_launch)
        return kernel.log[-1]

    assert launch(buf) == ("jit", (8, 1, 1), (buf, 32, 1e-6), meta)
    # the compiled kernel gets every parameter in signature order (the constexprs last) on the current stream
    assert launch(buf) == ("compiled", (8, 1, 1), (buf, 32, 1e-6, 64, 4), 7)
    assert launch(buf, eps=1e-5)[0] == "compiled"  # float arguments are not specialized on
    assert launch(buf[1:])[0] == "jit"  # a pointer off 16-byte alignment: another specialization
    assert launch(buf, n=48)[0] == "jit"  # another integer value
    assert launch(buf.float())[0] == "jit"  # another dtype
    assert launch(buf, n=48)[0] == "compiled"


def test_cached_launch_keys_apart_kernels_and_what_the_grid_depends_on(fake_cuda_launch):
    """Two kernels with the same arguments and meta, or one launch whose grid depends on something outside its
    arguments (``key_extra``: FlashNormAttention's grid follows the longest sequence), never share a launcher."""
    first, second, buf = _FakeKernel(), _FakeKernel(), torch.zeros(64, dtype=torch.float16)
    meta = dict(BLOCK=64, num_warps=4)
    for kernel, grid in ((first, (8, 1, 1)), (second, (8, 1, 1)), (first, (8, 1, 1)), (first, (9, 1, 1))):
        launch.cached_launch(kernel, lambda grid=grid: grid, (buf, 32, 1e-6), meta, fake_cuda_launch,
                             key_extra=grid)
    assert [entry[:2] for entry in first.log] == [("jit", (8, 1, 1)), ("compiled", (8, 1, 1)), ("jit", (9, 1, 1))]
    assert [entry[0] for entry in second.log] == ["jit"]


@pytest.mark.parametrize("grid", [(8,), (8, 2), (8, 2, 3)])
def test_cached_launch_passes_three_grid_dimensions(fake_cuda_launch, grid):
    """FlashNormAttention's row kernels launch on 1-D grids: the compiled launcher still needs x, y and z."""
    kernel, buf = _FakeKernel(), torch.zeros(64, dtype=torch.float16)
    for _ in range(2):
        launch.cached_launch(kernel, lambda: grid, (buf, 32, 1e-6), dict(BLOCK=64, num_warps=4), fake_cuda_launch)
    assert kernel.log[-1][:3] == ("compiled", grid + (1,) * (3 - len(grid)), (buf, 32, 1e-6, 64, 4))


def test_through_op_routes_eager_launches_through_the_thin_op(monkeypatch):
    """The selection times a Gluon plan's host cost through the op the compiled graph calls."""
    launched = []
    monkeypatch.setattr(norm_gemm_gluon, "_launch_kernel", lambda *args: launched.append(args))
    x, w, out = torch.zeros(8, 64, dtype=torch.float16), torch.zeros(16, 64, dtype=torch.float16), torch.zeros(8, 16)
    cfg = norm_gemm_gluon.CONFIGS[0]
    norm_gemm_gluon.launch(x, w, out, cfg)
    assert len(launched) == 1 and launched[0][_op_arg_names().index("w_kn")] is False
    with norm_gemm_gluon.through_op(), pytest.raises(NotImplementedError, match="gluon_norm_gemm.*CPU"):
        norm_gemm_gluon.launch(x, w, out, cfg)  # the op has a CUDA kernel only
    assert len(launched) == 1 and not norm_gemm_gluon._THROUGH_OP


@pytest.mark.parametrize("w_kn", [False, True])
def test_run_and_launch_take_the_weight_stored_k_n(monkeypatch, w_kn):
    """W_KN (weight [K, N], out = x @ w): ``run`` sums u[n] = Σ_k W'[k, n] over axis 0 and passes the flag on;
    the kernel launch takes N from w.shape[1], w.stride(0) (the K stride) as its weight stride, and W_KN."""
    M, K, N = 8, 64, 32
    x, out = torch.randn(M, K).bfloat16(), torch.empty(M, N, dtype=torch.bfloat16)
    w_nk = torch.randn(N, K).bfloat16()
    w = w_nk.t().contiguous() if w_kn else w_nk
    cfg = norm_gemm_gluon.CONFIGS[0]
    launched = []
    monkeypatch.setattr(norm_gemm_gluon, "launch", lambda *args, **kwargs: launched.append((args, kwargs)))
    rstd, mean, bias = torch.empty(M), torch.empty(M), torch.zeros(N)
    norm_gemm_gluon.run("in_loop", cfg, x, w, out, rstd, 1e-6, bias, mean, w_kn=w_kn)
    (args, kwargs), = launched
    assert args[1] is w and kwargs["w_kn"] is w_kn and kwargs["row_stats"] == norm_gemm_gluon.LN_STATS
    assert torch.equal(kwargs["u"], w_nk.sum(1, dtype=torch.float32))  # per output column n, whatever the storage

    kernel_launches = []
    monkeypatch.setattr(norm_gemm_gluon, "_ensure_allocator", lambda: None)
    monkeypatch.setattr(norm_gemm_gluon, "_cached_launch",
                        lambda kernel, grid, args, meta, device: kernel_launches.append((kernel, args, meta)))
    norm_gemm_gluon._launch_kernel(x, w, out, None, None, None, None, 0.0, norm_gemm_gluon.NO_STATS, False, False,
                                   cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["NUM_BUFFERS"], cfg["GROUP_M"],
                                   cfg["num_warps"], 0, w_kn)
    (kernel, args, meta), = kernel_launches
    values = dict(zip(kernel.arg_names, args))
    assert (values["M"], values["N"], values["K"]) == (M, N, K)
    assert values["stride_w"] == (N if w_kn else K) and meta["W_KN"] is w_kn
    # the cached launcher passes every parameter after the arguments from meta, defaults included
    assert [name for name in kernel.arg_names[len(args):] if name not in meta] == []


def _op_arg_names():
    return [a.name for a in torch.ops.norm_fusion.gluon_norm_gemm.default._schema.arguments]


def test_the_launch_op_takes_w_kn_and_the_post_norm_with_defaults():
    """Graphs traced before these arguments existed (and every [N, K] pre-norm launch) leave them out: w_kn and
    everything after it has a default."""
    arguments = torch.ops.norm_fusion.gluon_norm_gemm.default._schema.arguments
    names = _op_arg_names()
    assert arguments[names.index("w_kn")].default_value is False
    assert names[names.index("w_kn"):] == ["w_kn", "post_norm", "residual", "gamma", "beta", "z", "residual_out"]
    assert all(a.has_default_value() for a in arguments[names.index("w_kn"):])
    assert arguments[names.index("z")].alias_info.is_write  # the op writes z, as it does out, rstd and mean


# --- the post-norm "row" epilogue (post_run), offered with POST_CONFIGS (checked: gluon_probe.py --post)

@pytest.mark.parametrize("dtype,M,N,cfg,w_kn,reason", [
    (torch.bfloat16, 4096, 257, 0, False, "whole rows"),  # one column past the 128x256 tile
    (torch.bfloat16, 4096, 256, 1, False, "whole rows"),  # the 128x128 config holds N <= 128 only
    (torch.float32, 4096, 256, 0, False, "16-bit"),
    (torch.bfloat16, 4096, 256, 0, True, None),  # W [K, N]
    (torch.bfloat16, 4096, 196, 0, False, "16-byte"),  # TMA: the output's rows
    (torch.bfloat16, 2 ** 23, 256, 0, False, "32-bit"),  # the epilogue's pointer offsets
    (torch.bfloat16, 4096, 200, 0, False, None),
    (torch.bfloat16, 4096, 128, 1, False, None),
])
def test_post_norm_needs_whole_rows_per_tile(sm90, dtype, M, N, cfg, w_kn, reason):
    got = norm_gemm_gluon.post_unsupported_reason(dtype, sm90, M, 1024, N, norm_gemm_gluon.CONFIGS[cfg], w_kn)
    assert got is None if reason is None else reason in got


def test_post_norm_off_sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    assert "sm_90" in norm_gemm_gluon.post_unsupported_reason(torch.bfloat16, torch.device("cuda", 0), 4096, 1024,
                                                              256, norm_gemm_gluon.CONFIGS[0])


@pytest.mark.parametrize("gluon", [True, False])
@pytest.mark.parametrize("N", [256, 1024])
def test_post_norm_tuning_offers_the_gluon_row_plans_where_rows_fit(sm90, monkeypatch, gluon, N):
    """post_tuned_plan times the Gluon row plans next to the Triton ones (gluon=True) where a tile holds whole
    rows; the dgrad epilogue (_post_candidate_plans alone) and gluon=False stay on the Triton mainloop."""
    monkeypatch.setattr(norm_gemm, "_num_sms", lambda index: 132)
    x = _x(sm90, 1024)
    timed = norm_gemm._post_plans(x, N, False, gluon)
    triton_plans = norm_gemm._post_candidate_plans(x, N)
    # whole rows per tile: row plans where N fits one, no plan at all where it does not
    assert [p[0] for p in triton_plans] == (["row", "row"] if N <= 256 else [])
    gluon_rows = [p for p in timed if p.kernel == norm_gemm.GLUON + "row"]
    expected = [cfg for cfg in norm_gemm_gluon.POST_CONFIGS if N <= cfg["BLOCK_N"]] if gluon else []
    assert [p[1] for p in gluon_rows] == expected and timed[:len(triton_plans)] == triton_plans


def _kernel_launches(monkeypatch):
    launches = []
    monkeypatch.setattr(norm_gemm_gluon, "_ensure_allocator", lambda: None)
    monkeypatch.setattr(norm_gemm_gluon, "_num_sms", lambda index: 132)
    monkeypatch.setattr(norm_gemm_gluon, "_cached_launch",
                        lambda kernel, grid, args, meta, device: launches.append(
                            (kernel, dict(zip(kernel.arg_names, args)), meta, grid())))
    return launches


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("cfg", [norm_gemm_gluon.CONFIGS[0], norm_gemm_gluon.WS_CONFIGS[0]])
def test_post_run_launches_the_post_norm_epilogue(monkeypatch, layer_norm, cfg):
    """post_run hands the kernel z = x wᵀ + b + residual's operands unfolded: POST_NORM 1 (RMS) / 2 (LN), the
    norm's γ and β, both residuals, z, rstd (and μ) as the statistics' outputs, and no mean correction (CENTER)."""
    M, K, N = 1000, 64, 200
    x, w = torch.randn(M, K).bfloat16(), torch.randn(N, K).bfloat16()
    out, z, res, res_out = (torch.empty(M, N, dtype=torch.bfloat16) for _ in range(4))
    bias, gamma, beta = torch.randn(N).bfloat16(), torch.randn(N).bfloat16(), torch.randn(N).bfloat16()
    rstd, mean = torch.empty(M), torch.empty(M)
    launches = _kernel_launches(monkeypatch)
    norm_gemm_gluon.post_run(cfg, x, w, out, z, mean, rstd, bias, res, gamma, beta if layer_norm else None, 1e-5,
                             layer_norm, residual_out=res_out)
    (kernel, args, meta, grid), = launches
    ws = cfg.get("warp_specialize", False)
    assert kernel is (norm_gemm_gluon.norm_gemm_gluon_ws_kernel if ws else norm_gemm_gluon.norm_gemm_gluon_kernel)
    assert meta["POST_NORM"] == (norm_gemm_gluon.LN_STATS if layer_norm else norm_gemm_gluon.RMS_STATS)
    assert meta["ROW_STATS"] == norm_gemm_gluon.NO_STATS and not meta["ROW_SCALE"] and not meta["CENTER"]
    assert meta["HAS_BIAS"] and args["bias_ptr"] is bias and args["rstd_ptr"] is rstd
    assert args["mean_ptr"] is (mean if layer_norm else out)  # unused (a placeholder) for RMSNorm
    assert (args["res_ptr"], args["gamma_ptr"], args["z_ptr"], args["res_out_ptr"]) == (res, gamma, z, res_out)
    assert args["beta_ptr"] is (beta if layer_norm else None)
    assert (args["M"], args["N"], args["K"], args["stride_om"]) == (M, N, K, N)
    assert grid == (triton.cdiv(M, cfg["BLOCK_M"]), 1, 1)  # one tile per row block


def test_pre_norm_launches_pass_no_post_norm_operands(monkeypatch):
    """The other variants get None for the post-norm's pointers: no parameter, so their PTX is unchanged."""
    launches = _kernel_launches(monkeypatch)
    x, w, out = torch.randn(8, 64).bfloat16(), torch.randn(16, 64).bfloat16(), torch.empty(8, 16)
    norm_gemm_gluon.launch(x, w, out, norm_gemm_gluon.CONFIGS[0])
    (_, args, meta, _), = launches
    assert meta["POST_NORM"] == 0
    assert all(args[name] is None for name in ("res_ptr", "gamma_ptr", "beta_ptr", "z_ptr", "res_out_ptr"))


def test_matmul_norm_allocates_the_outputs(monkeypatch):
    """norm_gemm.matmul_norm hands a "gluon_row" plan to post_run with the outputs it allocated: (y, z or None,
    mean or None, rstd); z only with write_z."""
    runs = []
    monkeypatch.setattr(norm_gemm_gluon, "post_run", lambda *args: runs.append(args))
    x, w = torch.randn(8, 64).bfloat16(), torch.randn(16, 64).bfloat16()
    plan = ("gluon_row", norm_gemm_gluon.CONFIGS[0])
    y, z, mean, rstd = norm_gemm.matmul_norm(x, w, None, None, None, None, 1e-6, layer_norm=False, plan=plan)
    assert y.shape == (8, 16) and y.dtype == torch.bfloat16 and z is None and mean is None and rstd.shape == (8,)
    y, z, mean, rstd = norm_gemm.matmul_norm(x, w, None, None, None, None, 1e-6, layer_norm=True, plan=plan,
                                             write_z=True)
    assert z.shape == (8, 16) and mean.dtype == torch.float32
    assert len(runs) == 2 and runs[1][4] is z and runs[1][5] is mean


def test_traced_post_run_records_the_thin_op_with_its_operands():
    """While the pass traces (fake tensors), post_run becomes one gluon_norm_gemm call in the graph, taking the
    post-norm's operands by the schema's trailing arguments."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    cfg = norm_gemm_gluon.CONFIGS[0]

    def f(x, w, res, gamma, beta):
        y, z, mean, rstd = norm_gemm.matmul_norm(x, w, None, res, gamma, beta, 1e-5, layer_norm=True,
                                                 plan=("gluon_row", cfg), write_z=True)
        return y, z, mean, rstd

    with FakeTensorMode():
        operands = (torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(16, 32, dtype=torch.bfloat16),
                    torch.empty(64, 16, dtype=torch.bfloat16), torch.empty(16, dtype=torch.bfloat16),
                    torch.empty(16, dtype=torch.bfloat16))
        graph = make_fx(f, tracing_mode="fake")(*operands)
    calls = [n for n in graph.graph.nodes if n.target is torch.ops.norm_fusion.gluon_norm_gemm.default]
    assert len(calls) == 1
    call = calls[0]
    kwargs = dict(zip(_op_arg_names(), call.args)) | call.kwargs
    assert kwargs["post_norm"] == norm_gemm_gluon.LN_STATS
    assert all(kwargs[name] is not None for name in ("residual", "gamma", "beta", "z", "mean", "rstd"))
    assert kwargs.get("residual_out") is None
