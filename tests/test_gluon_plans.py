"""Which plans run on the Gluon mainloop (kernels/norm_gemm_gluon.py), decided on the host: no GPU needed. The
kernel itself is compiled for sm_90 by test_sm90_compile.py and checked against float64 by the GPU tests."""

import types

import pytest
import torch

from norm_fusion_inductor.kernels import norm_gemm, norm_gemm_gluon


@pytest.fixture
def sm90(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    return torch.device("cuda", 0)


def _x(device, K, dtype=torch.bfloat16):
    return types.SimpleNamespace(is_cuda=True, dtype=dtype, shape=(4096, K), device=device)


def test_gluon_plans_offered_for_16_bit_inputs_on_sm90(sm90):
    plans = norm_gemm._candidate_plans(_x(sm90, 1024))
    gluon = [p for p in plans if p[0].startswith(norm_gemm.GLUON)]
    assert {p[0] for p in gluon} == {"gluon_in_loop", "gluon_pre_pass"}
    assert len(gluon) == 2 * len(norm_gemm_gluon.CONFIGS)
    assert len(plans) == len(gluon) + 2 * len(norm_gemm._GPU_CONFIGS)  # the Triton mainloop's plans stay


@pytest.mark.parametrize("dtype,K,w_kn,center,reason", [
    (torch.float32, 1024, False, False, "16-bit"),
    (torch.bfloat16, 1024, True, False, "[K, N]"),
    (torch.bfloat16, 64, False, False, "fill"),  # one K step: the 3-stage pipeline has nothing to prefetch
])
def test_gluon_plans_left_out(sm90, dtype, K, w_kn, center, reason):
    plans = norm_gemm._candidate_plans(_x(sm90, K, dtype), center=center, w_kn=w_kn)
    assert not [p for p in plans if p[0].startswith(norm_gemm.GLUON)]
    cfg = norm_gemm_gluon.CONFIGS[0]
    assert reason in norm_gemm_gluon.unsupported_reason(dtype, sm90, K, cfg, "in_loop", center, w_kn)


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
    assert plans and not [p for p in plans if p[0].startswith(norm_gemm.GLUON)]



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

    monkeypatch.setattr(norm_gemm_gluon, "_LAUNCHERS", {})
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


def test_through_op_routes_eager_launches_through_the_thin_op(monkeypatch):
    """The selection times a Gluon plan's host cost through the op the compiled graph calls."""
    launched = []
    monkeypatch.setattr(norm_gemm_gluon, "_launch_kernel", lambda *args: launched.append(args))
    x, w, out = torch.zeros(8, 64, dtype=torch.float16), torch.zeros(16, 64, dtype=torch.float16), torch.zeros(8, 16)
    cfg = norm_gemm_gluon.CONFIGS[0]
    norm_gemm_gluon.launch(x, w, out, cfg)
    assert len(launched) == 1 and launched[0][-1] is False  # w_kn, the op's last argument
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
    monkeypatch.setattr(norm_gemm, "_ensure_allocator", lambda: None)
    monkeypatch.setattr(norm_gemm_gluon, "_cached_launch",
                        lambda kernel, grid, args, meta, device: kernel_launches.append((kernel, args, meta)))
    norm_gemm_gluon._launch_kernel(x, w, out, None, None, None, None, 0.0, norm_gemm_gluon.NO_STATS, False, False,
                                   cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["NUM_BUFFERS"], cfg["GROUP_M"],
                                   cfg["num_warps"], 0, w_kn)
    (kernel, args, meta), = kernel_launches
    values = dict(zip(kernel.arg_names, args))
    assert (values["M"], values["N"], values["K"]) == (M, N, K)
    assert values["stride_w"] == (N if w_kn else K) and meta["W_KN"] is w_kn


def test_the_launch_op_takes_w_kn_with_a_default():
    """Graphs traced before the flag existed (and every [N, K] launch) leave it out."""
    schema = torch.ops.norm_fusion.gluon_norm_gemm.default._schema
    assert schema.arguments[-1].name == "w_kn" and schema.arguments[-1].default_value is False
