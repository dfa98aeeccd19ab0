"""The direct launch (what the pass inserts for a fused site so that Inductor launches the kernels itself): the
traced graph, checked on the CPU with fake CUDA tensors, run under the Triton interpreter (traced with fake CPU
tensors), and the fallback to the custom op when the direct launch cannot serve a site. On the GPU:
test_gpu.py, test_gpu_post_norm.py."""

import pytest
import torch

from norm_fusion_inductor import ops
from norm_fusion_inductor.kernels import epilogue_gemm as eg

HOP = torch.ops.higher_order.triton_kernel_wrapper_functional


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(eg, "_num_sms", lambda index: 132)  # no GPU to ask
    # conftest turns on the interpreter, whose kernels wrap_triton runs instead of tracing: trace compiled ones
    from triton.runtime.jit import JITFunction

    from norm_fusion_inductor.kernels import common

    for module in (eg, common):
        for name, kernel in vars(module).items():
            if hasattr(kernel, "fn") and type(kernel).__name__ == "InterpretedFunction":
                monkeypatch.setattr(module, name, JITFunction(kernel.fn))
    mode = torch._subclasses.FakeTensorMode()

    def make(*shape):
        with mode:
            return torch.empty(*shape, device="cuda", dtype=torch.float16)

    return make


def _launches(gm):
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    return [(kernel_side_table.get_kernel(n.kwargs["kernel_idx"]).fn.__name__, n.kwargs["kwargs"])
            for n in gm.graph.nodes if n.target is HOP]


def _post_args(make, M, K, N, layer_norm, write_z, w_kn=False, full=True, residual_after=False):
    """linear_post_norm's arguments (x [3, M/3, K]) made by ``make``: bias, residual, γ (and β) when ``full``."""
    x = make(3, M // 3, K)
    w = make(K, N) if w_kn else make(N, K)
    vec = (lambda: make(N)) if full else (lambda: None)
    return (x, w, vec(), make(M, N) if full else None, vec(), vec() if layer_norm else None, 1e-5, layer_norm, w_kn,
            write_z, make(M, N) if residual_after else None)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("layer_norm", [False, True], ids=["rms", "ln"])
@pytest.mark.parametrize("write_z", [False, True])
@pytest.mark.parametrize("N", [256, 96])
def test_post_norm_trace_is_one_kernel_launch(fake_cuda, layer_norm, write_z, N):
    """The post-norm op as Inductor launches it: one launch of the epilogue GEMM with the post-norm piece (whole
    rows in a tile: BLOCK_N the config's, ≥ N), no matmul left; x read only by the kernel, as its A operand; only
    the outputs the op returns written (a pointer the kernel stores to is cloned before the launch)."""
    M, K = 300, 256
    cfg = eg._configs(fake_cuda(M, K), eg.Epilogue(post_norm="ln" if layer_norm else "rms"), N)[0]
    assert cfg["BLOCK_N"] >= N
    args = _post_args(fake_cuda, M, K, N, layer_norm, write_z, residual_after=not write_z)
    gm = ops.trace_direct_launch(args, cfg)
    (name, kwargs), = _launches(gm)
    assert name == "epilogue_gemm_kernel"
    assert kwargs["POST_NORM"] == (2 if layer_norm else 1) and kwargs["WRITE_AUX"] is write_z
    assert kwargs["HAS_RESIDUAL"] and kwargs["HAS_BIAS"] and kwargs["HAS_POST_WEIGHT"]
    assert kwargs["HAS_POST_BIAS"] is layer_norm and kwargs["RESIDUAL_AFTER"] is (not write_z)
    assert kwargs["ROW_NORM"] == 0 and kwargs["STATS"] == 0 and kwargs["ACTIVATION"] == 0
    assert not kwargs["EPS_FROM_PTR"] and kwargs["norm_eps"] == 1e-5
    assert kwargs["BLOCK_N"] == cfg["BLOCK_N"] and kwargs["M"] == M and kwargs["N"] == N
    # x is read by the kernel only (through views), and only as its A operand: a pointer slot the flags leave
    # unused gets its own buffer, else Inductor would clone x (every pointer a kernel stores to counts as mutated)
    x_node = gm.graph.find_nodes(op="placeholder")[0]
    readers, stack, x_views = set(), [x_node], {x_node}
    while stack:
        for user in stack.pop().users:
            if user.target is torch.ops.aten.view.default:
                stack.append(user)
                x_views.add(user)
            else:
                readers.add(user.target)
    assert readers == {HOP}
    assert sorted(k for k, v in kwargs.items() if v in x_views) == ["a_ptr"]
    targets = {n.target for n in gm.graph.nodes}
    assert torch.ops.aten.mm.default not in targets and torch.ops.aten.addmm.default not in targets
    outputs = gm.graph.find_nodes(op="output")[0].args[0]
    shapes = [tuple(o.meta["val"].shape) for o in outputs]
    assert shapes == [(M, N), (M, N) if write_z else (0,), (M,) if layer_norm else (0,), (M,)]


def test_failed_trace_falls_back_to_the_op_with_the_reason(monkeypatch):
    """Never wrong: a site whose direct launch cannot be traced still runs, through the custom op, and says why."""
    import torch.nn as nn

    import norm_fusion_inductor as nfi
    from norm_fusion_inductor import selection

    from .helpers import rel_err

    def choose(site, config):
        return selection.Choice(True, "fused_triton", "test", plan=dict(eg.INTERPRETER_CONFIG))

    def broken_trace(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(selection, "choose", choose)
    monkeypatch.setattr(ops, "trace_direct_launch", broken_trace)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 16), nn.LayerNorm(16))
    x = torch.randn(4, 32)
    torch._dynamo.reset()
    nfi.clear_reports()
    out = torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"fusions": ("matmul_norm",)}})(x)
    assert rel_err(out, model(x)) < 1e-5
    [site] = nfi.reports()
    assert site.rewritten and site.fusion == "matmul_norm"
    assert site.implementation == "fused_triton (custom op: direct launch failed to trace (RuntimeError: boom))"
    torch._dynamo.reset()


@pytest.mark.parametrize("launch", ["direct", "op"])
def test_direct_launch_rejection_reasons(launch):
    from norm_fusion_inductor import selection
    from norm_fusion_inductor.config import NormFusionConfig
    from norm_fusion_inductor.patterns.common import _direct_launch_rejection

    graph = torch.fx.Graph()
    x, w, eps_node = (graph.placeholder(n) for n in ("x", "w", "eps"))
    x.meta["val"], w.meta["val"] = torch.empty(8, 16), torch.empty(4, 16)
    eps_node.meta["val"] = torch.empty(())
    config = NormFusionConfig(launch=launch)
    fused = selection.Choice(True, "fused_triton", "", dict(eg.INTERPRETER_CONFIG))

    def args(eps=1e-6):  # linear_post_norm's: eps at position 6
        return (x, w, None, None, None, None, eps, False, False, False, None)

    reason = _direct_launch_rejection(args(), fused, config, 6)
    if launch == "op":
        assert reason == "launch='op'"
        return
    assert reason is None
    assert _direct_launch_rejection(args(), selection.Choice(True, "fused_triton", ""), config,
                                    6) == "no tuned kernel config"
    assert _direct_launch_rejection(args(), selection.Choice(True, "reference", "", dict(eg.INTERPRETER_CONFIG)),
                                    config, 6) == "no tuned kernel config"
    assert _direct_launch_rejection(args(eps_node), fused, config, 6) == "eps is a graph tensor"
    x.meta["val"] = torch.empty(10, 16)[1:9]  # starts 64 bytes in: aligned
    assert _direct_launch_rejection(args(), fused, config, 6) is None
    x.meta["val"] = torch.empty(9, 17).view(-1)[1:129].view(8, 16)  # starts 4 bytes in
    assert "16-byte aligned" in _direct_launch_rejection(args(), fused, config, 6)


def _interpreted_kernels(monkeypatch) -> dict:
    """The interpreter's kernels of the epilogue GEMM module, swapped for compiled ones (which wrap_triton traces)
    until ``_run_interpreted`` swaps them back; skips without the interpreter."""
    from triton.runtime.jit import JITFunction

    from norm_fusion_inductor.kernels import common

    interpreted = {}  # (module, name) -> the interpreter's function; compiled ones while tracing
    for module in (eg, common):
        for name, kernel in vars(module).items():
            if hasattr(kernel, "fn") and type(kernel).__name__ == "InterpretedFunction":
                interpreted[module, name] = kernel
                monkeypatch.setattr(module, name, JITFunction(kernel.fn))
    if not interpreted:
        pytest.skip("needs the Triton interpreter (the CPU suite's conftest turns it on)")
    return interpreted


def _run_interpreted(monkeypatch, interpreted, graph):
    """``graph`` as a GraphModule whose kernel launches run the interpreter's kernels; torch.empty poisoned with
    NaN meanwhile (an output the launch leaves unwritten shows)."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    for (module, name), kernel in interpreted.items():
        monkeypatch.setattr(module, name, kernel)
    for node in graph.nodes:
        if node.target is HOP:
            traced = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])  # (wrapped with its launch options)
            monkeypatch.setitem(kernel_side_table.id_to_kernel, node.kwargs["kernel_idx"],
                                interpreted[eg, traced.fn.__name__])
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *s, **k: real_empty(*s, **k).fill_(float("nan"))
                        if k.get("dtype", torch.float32).is_floating_point else real_empty(*s, **k))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


POST_TRACED_CASES = {  # layer_norm, write_z, w_kn, every optional operand, a residual after the norm
    "ln_full_z": (True, True, False, True, False),
    "ln_bare_after_wkn": (True, False, True, False, True),
    "rms_full_after": (False, False, False, True, True),
    "rms_bare_z_wkn": (False, True, True, False, False),
}


@pytest.mark.parametrize("case", sorted(POST_TRACED_CASES))
def test_post_norm_traced_launch_computes_the_op(monkeypatch, case):
    """The post-norm's traced direct launch (ops.trace_direct_launch: strides, flags, grid, the outputs it returns),
    run: traced with fake CPU tensors and an N (40) below the tile's width, its kernel then swapped for the
    interpreter's and executed on fresh operands (outputs poisoned with NaN) against float64: y, z, mean, rstd."""
    from .helpers import linear_post_norm_reference64, rel_err

    interpreted = _interpreted_kernels(monkeypatch)
    layer_norm, write_z, w_kn, full, after = POST_TRACED_CASES[case]
    M, K, N, eps = 45, 48, 40, 1e-5
    mode = torch._subclasses.FakeTensorMode()

    def real(*shape):
        return torch.randn(*shape) + 0.5

    reals = _post_args(real, M, K, N, layer_norm, write_z, w_kn, full, after)
    reals = reals[:6] + (eps,) + reals[7:]
    fakes = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in reals)
    cfg = eg._configs(reals[0], eg.Epilogue(post_norm="ln" if layer_norm else "rms"), N)[0]
    assert cfg["BLOCK_N"] > N
    traced = ops.trace_direct_launch(fakes, cfg)
    assert [name for name, _ in _launches(traced)] == ["epilogue_gemm_kernel"]
    gm = _run_interpreted(monkeypatch, interpreted, traced.graph)
    y, z, mean, rstd = gm(*(a for a in reals if isinstance(a, torch.Tensor)))
    x, w, b, r, g, beta = reals[:6]
    ref_y, ref_z, ref_mean, ref_rstd = linear_post_norm_reference64(
        x.reshape(M, K), w.t() if w_kn else w, b, r, g, beta, eps, layer_norm, reals[10])
    assert y.shape == (M, N) and not y.isnan().any() and rel_err(y, ref_y) < 1e-5
    assert rstd.shape == (M,) and rel_err(rstd, ref_rstd.flatten()) < 1e-5
    assert z.shape == ((M, N) if write_z else (0,)) and (not write_z or rel_err(z, ref_z) < 1e-5)
    assert mean.shape == ((M,) if layer_norm else (0,)) and (not layer_norm or rel_err(mean, ref_mean.flatten()) < 1e-5)


def _is_triton_function(obj) -> bool:
    # JITFunction compiled, InterpretedFunction under TRITON_INTERPRET=1 (conftest), Gluon's subclass
    return type(obj).__name__.endswith(("JITFunction", "InterpretedFunction")) and callable(getattr(obj, "fn", None))


def test_kernel_helpers_are_called_by_their_own_names():
    """Inductor copies a launched kernel's @triton.jit helpers into its generated code by their source, so under
    their own names: a helper imported under an alias (``import tile_coords as _tile_coords``) is undefined there,
    and the first compile on a GPU fails with a NameError."""
    import importlib
    import pkgutil

    import norm_fusion_inductor.kernels as kernels

    aliased, seen = [], 0
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"{kernels.__name__}.{info.name}")
        for kernel_name, kernel in vars(module).items():
            if not _is_triton_function(kernel):
                continue
            seen += 1
            for name in kernel.fn.__code__.co_names:
                helper = kernel.fn.__globals__.get(name)
                if _is_triton_function(helper) and helper.fn.__name__ != name:
                    aliased.append(f"{info.name}.{kernel_name} calls {helper.fn.__name__} as {name}")
    assert seen > 10
    assert not aliased, aliased


def test_regrouped_gemm_traces_to_one_kernel_launch(fake_cuda, monkeypatch):
    """The regrouped GEMM with a tuned config, traced as the pass inserts it (functional, with a tuned block
    config): one ``wrap_triton`` launch of the epilogue kernel that reads the stream only as its A operand, no
    op call and no matmul left for Inductor."""
    from norm_fusion_inductor import regrouped
    from norm_fusion_inductor.patterns.regrouped_norm import insert_traced

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))
    M, K, N = 300, 256, 512
    a, w, b = fake_cuda(M, K), fake_cuda(N, K), fake_cuda(N)
    rstd = a.new_empty(M, dtype=torch.float32)
    cfg = dict(eg.GPU_CONFIGS[0])
    gemm = regrouped.gemm_call(cfg)

    graph = torch.fx.Graph()
    nodes = {}
    for name, val in dict(a=a, w=w, b=b, rstd=rstd).items():
        nodes[name] = graph.placeholder(name)
        nodes[name].meta["val"] = val
    anchor = graph.output(None)

    def consumer(a, w, b, rstd):
        return gemm(a, w, b, None, rstd, None, None, "rms", "silu", False, "none", False, backend="triton")[0]

    out = insert_traced(graph, consumer, nodes, before=anchor, functional=True)[0]
    assert tuple(out.meta["val"].shape) == (M, N)
    launches = [n for n in graph.nodes if n.target is HOP]
    assert len(launches) == 1
    kwargs = launches[0].kwargs["kwargs"]
    assert kwargs["BLOCK_N"] == cfg["BLOCK_N"] and kwargs["ROW_NORM"] == eg.STATS["rms"]
    assert sorted(k for k, v in kwargs.items() if v is nodes["a"]) == ["a_ptr"]
    targets = {n.target for n in graph.nodes}
    assert torch.ops.norm_fusion.epilogue_gemm.default not in targets and torch.ops.norm_fusion.folded_epilogue_gemm.default not in targets
    assert torch.ops.aten.mm.default not in targets and torch.ops.aten.addmm.default not in targets


def _operands(M, K, N, D):
    """Fresh operands for each epilogue piece (N output columns; 2N interleaved for a gated pair)."""
    return dict(a=torch.randn(M, K), w=torch.randn(N, K) / K ** 0.5, w2=torch.randn(2 * N, K) / K ** 0.5,
                bias=torch.randn(N), residual=torch.randn(M, N), scale=torch.rand(M) + 0.5, shift=torch.randn(M),
                u=torch.randn(N), head_weight=torch.rand(D) + 0.5, cos=torch.rand(M, D), sin=torch.rand(M, D))


# each case: the op's arguments (names of _operands, then the flags) and the outputs compared
TRACED_CASES = {
    "rms_silu": dict(args=("a", "w", "bias", None, "scale", None, None), flags=("rms", "silu", False, "none")),
    "ln_gelu_aux": dict(args=("a", "w", "bias", None, "scale", "shift", "u"), flags=("ln", "gelu", True, "none")),
    "swiglu": dict(args=("a", "w2", None, None, "scale", None, None), flags=("rms", "silu_mul", False, "none")),
    "producer_rms": dict(args=("a", "w", "bias", "residual", None, None, None),
                         flags=("none", "none", False, "rms")),
    "producer_ln": dict(args=("a", "w", "bias", "residual", None, None, None), flags=("none", "none", False, "ln")),
    "qk_norm_rope": dict(args=("a", "w", None, None, "scale", None, None), flags=("rms", "none", False, "none"),
                         head=True),
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic_M"])
@pytest.mark.parametrize("case", sorted(TRACED_CASES))
def test_regrouped_traced_launch_computes_the_gemm(monkeypatch, case, dynamic):
    """The traced launch's wiring (strides, flags, grid, the outputs it returns), run: the graph traced with fake
    CPU tensors, its kernel then swapped for the interpreter's, and executed on fresh operands (outputs poisoned
    with NaN) against the op's torch reference on float64 operands (``regrouped.reference``): out, aux and the
    statistics partials. ``dynamic_M``: traced with M symbolic (dynamic shapes) and run at another M; the trace
    adds no guard on M (the whole persistent grid, sizes read from the inputs)."""
    from norm_fusion_inductor import regrouped
    from norm_fusion_inductor.patterns.regrouped_norm import insert_traced

    interpreted = _interpreted_kernels(monkeypatch)
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    spec = TRACED_CASES[case]
    M, K, N, D = 37, 48, 64, 16
    torch.manual_seed(11)
    reals = _operands(M, K, N, D)
    names = [n for n in spec["args"] if n is not None] + (["head_weight", "cos", "sin"] if spec.get("head") else [])
    mode = torch._subclasses.FakeTensorMode(shape_env=ShapeEnv() if dynamic else None)

    def fake(t):  # with dynamic M, every dim of size M symbolic (one symbol: the inputs share M)
        if not dynamic:
            return mode.from_tensor(t)
        dims = [DimDynamic.DYNAMIC if d == M else DimDynamic.STATIC for d in t.shape]
        return mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims))

    graph = torch.fx.Graph()
    nodes = {}
    for name in names:
        nodes[name] = graph.placeholder(name)
        nodes[name].meta["val"] = fake(reals[name])
    anchor = graph.output(None)
    gemm = regrouped.gemm_call(dict(eg.INTERPRETER_CONFIG, BLOCK_N=32))

    def call(op, **tensors):
        args = [tensors[n] if n is not None else None for n in spec["args"]]
        head = {}
        if spec.get("head"):
            head = dict(head_dim=D, head_weight=tensors["head_weight"], head_eps=1e-6, rope_cos=tensors["cos"],
                        rope_sin=tensors["sin"])
        return op(*args, *spec["flags"], False, backend="triton", **head)

    anchor.args = (tuple(insert_traced(graph, lambda **t: call(gemm, **t), nodes, before=anchor, functional=True)),)
    if dynamic:
        assert not mode.shape_env.guards, mode.shape_env.guards
        M = 53  # run at another M than traced
        reals = _operands(M, K, N, D)
    wide = {k: v.double() for k, v in reals.items()}
    args = [wide[n] if n is not None else None for n in spec["args"]]
    row_norm, activation, write_aux, stats = spec["flags"]
    head = spec.get("head", False)
    epilogue = regrouped._epilogue(row_norm, activation, write_aux, stats, args[2] is not None, args[3] is not None,
                                   "none", D if head else 0, head)
    head_norm = eg.HeadNorm(wide["head_weight"], 1e-6, wide["cos"], wide["sin"]) if head else None
    refs = regrouped.reference(*args, epilogue, False, None, head_norm)
    gm = _run_interpreted(monkeypatch, interpreted, graph)
    outs = gm(*(reals[n] for n in names))
    assert len(outs) == len(refs) == 3
    for out, ref in zip(outs, refs):
        assert out.shape == ref.shape
        if ref.numel():
            assert not out.isnan().any()
            assert ((out.double() - ref.double()).norm() / ref.double().norm()).item() < 1e-5


def test_direct_launch_folds_in_the_graph_rather_than_through_the_fold_cache():
    """Inference offers the fold cache (an op call per step, no GPU time). Where the GEMM is then launched
    directly, the cache's host time would show in a step that short: W·γ is folded in the graph and its passes
    priced; where that loses, the site goes to the op path with the cache, or stays unfused."""
    from norm_fusion_inductor.patterns.regrouped_norm import choose_fold
    from norm_fusion_inductor.selection import Choice

    direct = lambda reason: Choice(True, "regrouped_triton", reason, dict(BLOCK_M=128))  # noqa: E731
    op = lambda reason: Choice(True, "regrouped_quack", reason)  # noqa: E731
    unfused = lambda reason: Choice(False, "unfused", reason)  # noqa: E731
    sources = ["w", "gamma"]
    asked = []

    def chooser(cached, per_call):
        def choose(passes):
            asked.append(passes)
            return cached(f"{passes} passes") if passes == 0 else per_call(f"{passes} passes")
        return choose

    choice, kept, note = choose_fold(chooser(direct, direct), 2, sources, "W·γ kept folded between calls")
    assert asked == [0, 2] and choice.reason == "2 passes" and kept is None and "launched directly" in note
    asked.clear()
    choice, kept, note = choose_fold(chooser(direct, unfused), 2, sources, "kept")
    assert asked == [0, 2] and not choice.fused and kept is sources
    choice, kept, note = choose_fold(chooser(direct, op), 2, sources, "kept")
    assert choice.implementation == "regrouped_quack" and kept is sources and note == "kept"
    asked.clear()
    choice, kept, note = choose_fold(chooser(op, direct), 2, sources, "kept")  # the op path keeps the cache
    assert asked == [0] and choice.reason == "0 passes" and kept is sources
    asked.clear()
    choice, kept, note = choose_fold(chooser(direct, direct), 2, None, "training")  # no cache offered
    assert asked == [2] and kept is None and note == "training"
