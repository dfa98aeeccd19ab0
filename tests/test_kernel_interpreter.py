"""The post-norm epilogue of the GEMM kernel (kernels/epilogue_gemm.py, ``post_norm_gemm``) on the CPU under
TRITON_INTERPRET=1 (fp32/fp16; the 3.6 interpreter computes bf16 dots wrongly) against float64; the custom op
linear_post_norm's kernel path, reference path, fake implementation and autograd; the block-config tuner."""


import pytest
import torch

from norm_fusion_inductor.kernels import epilogue_gemm as eg

from .helpers import interpret_kernels, interpreter, linear_post_norm_reference64, linear_post_norm_unfused, rel_err

TOL = {torch.float32: 1e-5, torch.float16: 2e-3}


# --- post-norm epilogue -----------------------------------------------------------------------------------------

def _post_operands(M, K, N, dtype, residual, affine, shift=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(dtype)
    w = (torch.randn(N, K, generator=g) / K**0.5).to(dtype)
    b = (torch.randn(N, generator=g) + 0.5).to(dtype)
    r = (torch.randn(M, N, generator=g) + shift).to(dtype) if residual else None
    gamma = (torch.rand(N, generator=g) + 0.5).to(dtype) if affine else None
    beta = torch.randn(N, generator=g).to(dtype) if affine else None
    return x, w, b, r, gamma, beta


# each flag of the post-norm piece on and off across the cases, with both norms (RMSNorm takes a β too)
POST_CASES = {
    "bias-res-affine-z": dict(bias=True, residual=True, gamma=True, beta=True, write_z=True, after=False, w_kn=False,
                              eps_tensor=False),
    "after-wkn": dict(bias=False, residual=False, gamma=False, beta=False, write_z=False, after=True, w_kn=True,
                      eps_tensor=False),
    "bias-gamma-z-after-eps_tensor": dict(bias=True, residual=False, gamma=True, beta=False, write_z=True, after=True,
                                          w_kn=False, eps_tensor=True),
    "res-beta-wkn": dict(bias=False, residual=True, gamma=False, beta=True, write_z=False, after=False, w_kn=True,
                         eps_tensor=False),
}


@interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("layer_norm", [False, True], ids=["rms", "ln"])
@pytest.mark.parametrize("N", [24, 80, 192])  # tiles of 32, 128 and 256 columns: masked columns in each
@pytest.mark.parametrize("case", sorted(POST_CASES))
def test_post_norm_kernel_matches_float64(dtype, layer_norm, N, case, poisoned_empty):
    """y, z, mean and rstd of post_norm_gemm against float64, outputs poisoned with NaN beforehand. M = 77 rows:
    5 row tiles on a persistent grid of 4 programs (the loop across rounds), the last tile partial."""
    flags = POST_CASES[case]
    M, K, eps = 77, 48, 1e-5
    x, w, b, r, gamma, beta = _post_operands(M, K, N, dtype, flags["residual"], True, seed=N * 7 + len(case))
    b = b if flags["bias"] else None
    gamma = gamma if flags["gamma"] else None
    beta = beta if flags["beta"] else None
    after = torch.randn(M, N).to(dtype) if flags["after"] else None
    ref_y, ref_z, ref_mean, ref_rstd = linear_post_norm_reference64(x, w, b, r, gamma, beta, eps, layer_norm, after)
    weight = w.t().contiguous() if flags["w_kn"] else w
    eps_arg = torch.tensor([eps], dtype=torch.float32) if flags["eps_tensor"] else eps
    y, z, mean, rstd = eg.post_norm_gemm(x, weight, b, r, gamma, beta, eps_arg, layer_norm=layer_norm,
                                         write_z=flags["write_z"], w_kn=flags["w_kn"], residual_after=after)
    assert y.shape == (M, N) and y.dtype == dtype and rstd.shape == (M,) and rstd.dtype == torch.float32
    assert rel_err(y, ref_y) < TOL[dtype], rel_err(y, ref_y)
    assert rel_err(rstd, ref_rstd.flatten()) < 1e-5
    if flags["write_z"]:
        assert z.shape == (M, N) and rel_err(z, ref_z) < TOL[dtype]
    else:
        assert z is None
    if layer_norm:
        assert mean.shape == (M,) and rel_err(mean, ref_mean.flatten()) < 1e-5
    else:
        assert mean is None


@interpreter
def test_post_norm_kernel_fp32_norm_weight_with_fp16_input():
    """γ and β in fp32 with fp16 activations (a model that keeps its norm in fp32): read and applied in fp32."""
    M, K, N = 40, 32, 48
    x, w, b, r, _, _ = _post_operands(M, K, N, torch.float16, True, False, seed=3)
    gamma, beta = torch.rand(N) + 0.5, torch.randn(N)
    for layer_norm in (False, True):
        y = eg.post_norm_gemm(x, w, b, r, gamma, beta, 1e-6, layer_norm=layer_norm)[0]
        ref = linear_post_norm_reference64(x, w, b, r, gamma, beta, 1e-6, layer_norm)[0]
        assert y.dtype == torch.float16 and rel_err(y, ref) < TOL[torch.float16]


@interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shift", [100.0, 1000.0])
def test_post_layer_norm_shifted_rows_within_unfused_error(dtype, shift):
    """Rows whose mean is 100 and 1000 times their std: the two-pass moments of the tile's rows keep the error
    within the unfused path's (which normalizes z rounded to the input dtype)."""
    M, K, N = 37, 48, 80
    x, w, b, r, g, beta = _post_operands(M, K, N, dtype, True, True, shift=shift, seed=int(shift))
    ref = linear_post_norm_reference64(x, w, b, r, g, beta, 1e-5, True)[0]
    unfused = rel_err(linear_post_norm_unfused(x, w, b, r, g, beta, 1e-5, True), ref)
    y = eg.post_norm_gemm(x, w, b, r, g, beta, 1e-5, layer_norm=True)[0]
    assert rel_err(y, ref) <= 2 * unfused + TOL[dtype] / 10, (rel_err(y, ref), unfused)


def test_post_norm_takes_whole_rows_only():
    """The piece holds whole rows in a tile: N up to MAX_POST_NORM_N, each config's BLOCK_N the rows' width
    rounded up to a power of two (at least 64 on the GPU, the interpreter's 32 on the CPU); wider rows and row
    counts whose offsets overflow int32 are declined with the reason; the piece takes no other epilogue."""
    assert eg.MAX_POST_NORM_N == 256
    assert eg.post_norm_problem(16384, 256) is None
    assert "N=264 > 256" in eg.post_norm_problem(16384, 264) and "regrouped_norm" in eg.post_norm_problem(8, 768)
    assert "32-bit" in eg.post_norm_problem(2 ** 24, 256)
    x = torch.empty(64, 32, dtype=torch.float16)
    assert "N=768" in eg.unsupported_reason(x, torch.empty(768, 32, dtype=torch.float16), False,
                                            eg.Epilogue(post_norm="ln"))

    class OnGpu(torch.Tensor):  # the host code picks its GPU configs for it
        @property
        def is_cuda(self):
            return True

    gpu = torch.Tensor._make_subclass(OnGpu, x)
    for N, block_n in ((24, 64), (64, 64), (96, 128), (192, 256), (256, 256)):
        for norm in ("rms", "ln"):
            configs = eg._configs(gpu, eg.Epilogue(post_norm=norm), N)
            assert configs and {c["BLOCK_N"] for c in configs} == {block_n}, (N, configs)
            assert len(configs) == len({tuple(sorted(c.items())) for c in configs})  # each once
        interpreted, = eg._configs(x, eg.Epilogue(post_norm="rms"), N)
        assert interpreted["BLOCK_N"] == max(eg.INTERPRETER_CONFIG["BLOCK_N"], 1 << (N - 1).bit_length())
    for bad in (dict(activation="gelu"), dict(row_norm="rms"), dict(stats="rms"), dict(head_dim=64, rope=True)):
        with pytest.raises(ValueError):
            eg.Epilogue(post_norm="rms", **bad)
    with pytest.raises(ValueError, match="residual_after"):
        eg.Epilogue(residual_after=True)
    assert eg.post_norm_epilogue(True, True, False, True, True) == eg.Epilogue(
        bias=True, write_aux=True, post_norm="ln", residual_after=True)


@interpreter
def test_post_norm_op_uses_kernel_under_interpreter(monkeypatch):
    """The op on 3-D operands (flattened to rows) runs the kernel where the tuning asks the interpreter to; a
    residual that is not contiguous or in another dtype goes to the reference, with the same result."""
    interpret_kernels(monkeypatch)
    calls = []
    real = eg.post_norm_gemm
    monkeypatch.setattr(eg, "post_norm_gemm", lambda *a, **k: calls.append(k) or real(*a, **k))
    x, w, b, r, g, beta = _post_operands(18, 32, 48, torch.float32, True, True)
    r_out = torch.randn(18, 48)
    op = torch.ops.norm_fusion.linear_post_norm
    y, z, mean, rstd = op(x.reshape(2, 9, 32), w, b, r, g, beta, 1e-5, True, False, True, r_out)
    ref_y, ref_z, ref_mean, ref_rstd = linear_post_norm_reference64(x, w, b, r, g, beta, 1e-5, True, r_out)
    assert len(calls) == 1 and calls[0]["layer_norm"] and calls[0]["write_z"] and calls[0]["config"] is None
    assert rel_err(y, ref_y) < 1e-5 and rel_err(z, ref_z) < 1e-5
    assert rel_err(mean, ref_mean.flatten()) < 1e-5 and rel_err(rstd, ref_rstd.flatten()) < 1e-5
    assert y.shape == z.shape == (18, 48) and mean.shape == rstd.shape == (18,)
    y_rms, z_rms, mean_rms, _ = op(x, w.t().contiguous(), None, None, g, None, 1e-5, False, True)
    assert len(calls) == 2 and calls[1]["w_kn"]
    assert rel_err(y_rms, linear_post_norm_reference64(x, w, None, None, g, None, 1e-5, False)[0]) < 1e-5
    assert z_rms.numel() == 0 and mean_rms.numel() == 0
    strided = torch.randn(48, 18).t()  # not contiguous: the reference path
    y_ref = op(x, w, b, strided, g, beta, 1e-5, True)[0]
    assert len(calls) == 2
    assert rel_err(y_ref, linear_post_norm_reference64(x, w, b, strided, g, beta, 1e-5, True)[0]) < 1e-5


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rms", "ln"])
def test_post_norm_op_reference_fake_and_gradients(layer_norm):
    """The op's reference path and autograd (recomputed reference) in float64; schema and fake checks."""
    x, w, b, r, g, beta = (t.requires_grad_() for t in _post_operands(10, 12, 8, torch.float64, True, True))
    beta = beta if layer_norm else None
    op = torch.ops.norm_fusion.linear_post_norm
    assert torch.autograd.gradcheck(lambda *a: op(*a, 1e-5, layer_norm, False, True)[:2], (x, w, b, r, g, beta))
    r_out = torch.randn_like(r).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w, r_out: op(x, w, None, None, None, None, 1e-5, layer_norm, False,
                                                           False, r_out)[0], (x, w, r_out))
    assert torch.autograd.gradcheck(lambda x, w: op(x, w, None, None, None, None, 1e-5, layer_norm)[0], (x, w))
    w_kn = w.detach().t().contiguous().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: op(x, w, None, None, None, None, 1e-5, layer_norm, True)[0],
                                    (x, w_kn))
    f = [t.detach().float() if t is not None else None for t in (x, w, b, r, g, beta)]
    torch.library.opcheck(op.default, (*f, 1e-5, layer_norm, False, True),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    twin = torch.ops.norm_fusion.linear_post_norm_tensor_eps
    torch.library.opcheck(twin.default, (*f, torch.tensor(1e-5), layer_norm, False, True),
                          test_utils=("test_schema", "test_faketensor"))
    assert torch.equal(twin(*f, torch.tensor(1e-5), layer_norm)[0], op(*f, 1e-5, layer_norm)[0])


# --- the block-config tuner ------------------------------------------------------------------------------------

def test_fastest_config_times_the_close_finalists_again():
    """One timing per config is noisy: the configs within FINALIST_SPREAD of the fastest first timing are timed
    again, interleaved, and the lowest median wins; a config that fails to launch is skipped; a config far
    behind is not timed again."""
    from norm_fusion_inductor.kernels import common

    first = {"a": 1.00, "b": 1.02, "c": 1.50, "d": 1.04}  # b is the fastest, a's first timing was lucky
    again = {"a": [1.10, 1.09, 1.11], "b": [1.00, 1.01, 0.99], "d": []}  # d: third, not a finalist
    last = []

    def run(cfg):
        if cfg == "broken":
            raise RuntimeError("out of shared memory")
        last.append(cfg)

    def time_one(fn):
        fn()
        cfg = last[-1]
        if cfg in first:
            return first.pop(cfg)
        return again[cfg].pop(0)

    assert common.fastest_config(["a", "broken", "b", "c", "d"], run, "test", time_one=time_one) == "b"
    assert common.MAX_FINALISTS == 2 and common.FINALIST_ROUNDS == 3
    assert all(not v for v in again.values())  # each finalist timed FINALIST_ROUNDS more times; c, d never again
    with pytest.raises(RuntimeError, match="no config compiled for nothing"):
        common.fastest_config(["broken"], run, "nothing", time_one=time_one)


def test_precompile_compiles_the_first_config_alone_then_the_rest_on_threads():
    """fastest_config's compile step: the first config alone (it sets up the kernel's caches), the others
    concurrently; a config that fails to compile is left to its launch (skipped by the timing), not raised."""
    import threading

    from norm_fusion_inductor.kernels.common import precompile

    calls = []
    first_done = threading.Event()

    def compile_only(cfg):
        calls.append((cfg, first_done.is_set(), threading.get_ident()))
        if cfg == 0:
            first_done.set()
        if cfg == 2:
            raise RuntimeError("out of shared memory")

    precompile(list(range(6)), compile_only)
    assert sorted(c for c, *_ in calls) == list(range(6))
    assert calls[0][:2] == (0, False) and all(done for c, done, _ in calls[1:])
    assert calls[0][2] == threading.get_ident()  # the first on the caller's thread
    precompile([7], lambda cfg: calls.append(cfg))  # one config: nothing to overlap, its launch compiles it
    assert calls[-1] != 7
