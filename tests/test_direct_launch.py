"""The direct launch (what the pass inserts for a fused site so that Inductor launches the kernels itself): the
traced graph, checked on the CPU with fake CUDA tensors, and the fallback to the custom op when the direct
launch cannot serve a site. Running the kernels needs a GPU: test_gpu.py."""

import pytest
import torch

from norm_fusion_inductor import ops
from norm_fusion_inductor.kernels import norm_gemm

HOP = torch.ops.higher_order.triton_kernel_wrapper_functional


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(norm_gemm, "_num_sms", lambda index: 132)  # no GPU to ask
    # conftest turns on the interpreter, whose kernels wrap_triton runs instead of tracing: trace compiled ones
    from triton.runtime.jit import JITFunction

    from norm_fusion_inductor.kernels import common, epilogue_gemm, row_norm

    for module in (norm_gemm, epilogue_gemm, common, row_norm):
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


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("prologue", norm_gemm.PROLOGUES)
def test_trace_is_kernel_launches(fake_cuda, norm, prologue):
    M, K, N = 300, 256, 512
    x, g, w, b = fake_cuda(3, 100, K), fake_cuda(K), fake_cuda(N, K), fake_cuda(N)
    cfg = norm_gemm._GPU_CONFIGS[2]
    args = (x, g, w, b, 1e-5, False) if norm == "rms" else (x, g, g, w, b, 1e-5, False)
    gm = ops.trace_direct_launch(norm, args, (prologue, cfg))
    launches = _launches(gm)
    names = [name for name, _ in launches]
    assert names == (["norm_gemm_kernel"] if prologue == "in_loop" else ["row_stats_kernel", "norm_gemm_kernel"])
    gemm = launches[-1][1]
    assert gemm["ROW_STATS"] is (prologue == "in_loop") and gemm["ROW_SCALE"] is (prologue == "pre_pass")
    assert gemm["CENTER"] is (norm == "ln") and gemm["M"] == M and gemm["BLOCK_N"] == cfg["BLOCK_N"]
    # x is read by the kernels only (through views): nothing else touches the [M, K] activation
    x_node = gm.graph.find_nodes(op="placeholder")[0]
    readers, stack = set(), [x_node]
    while stack:
        for user in stack.pop().users:
            if user.target is torch.ops.aten.view.default:
                stack.append(user)
            else:
                readers.add(user.target)
    assert readers == {HOP}
    # and only as the kernels' x: a pointer slot the flags leave unused gets its own buffer, else Inductor
    # would clone x (every pointer a kernel stores to counts as mutated)
    x_views = {x_node} | {n for n in gm.graph.nodes if n.target is torch.ops.aten.view.default}
    for name, kwargs in launches:
        slots = sorted(k for k, v in kwargs.items() if v in x_views)
        assert slots == ["x_ptr"], (name, slots)
    targets = {n.target for n in gm.graph.nodes}
    assert torch.ops.aten.mm.default not in targets and torch.ops.aten.addmm.default not in targets
    outputs = gm.graph.find_nodes(op="output")[0].args[0]
    shapes = [tuple(o.meta["val"].shape) for o in outputs]
    assert shapes == [(M, N)] + [(3, 100, 1)] * (1 if norm == "rms" else 2)


@pytest.mark.parametrize("layer_norm", [False, True], ids=["rms", "ln"])
@pytest.mark.parametrize("write_z", [False, True])
def test_post_norm_trace_is_one_kernel_launch(fake_cuda, layer_norm, write_z):
    """The post-norm op as Inductor would launch it: one GEMM launch with the epilogue (whole rows in a tile); the
    residual read, z written only when asked."""
    M, K, N = 300, 256, 256
    x, w, b, r, g = fake_cuda(3, 100, K), fake_cuda(N, K), fake_cuda(N), fake_cuda(M, N), fake_cuda(N)
    plan = norm_gemm._post_candidate_plans(x, N)[0]
    gm = ops.trace_direct_launch("post", (x, w, b, r, g, g if layer_norm else None, 1e-5, layer_norm, False,
                                          write_z), plan)
    (name, kwargs), = _launches(gm)
    assert name == "norm_gemm_kernel"
    assert kwargs["POST_NORM"] == (2 if layer_norm else 1) and kwargs["WRITE_Z"] is write_z
    assert kwargs["HAS_RESIDUAL"] and kwargs["BLOCK_N"] == N
    outputs = gm.graph.find_nodes(op="output")[0].args[0]
    shapes = [tuple(o.meta["val"].shape) for o in outputs]
    assert shapes == [(M, N), (M, N) if write_z else (0,), (M,) if layer_norm else (0,), (M,)]


def test_failed_trace_falls_back_to_the_op_with_the_reason(monkeypatch):
    """Never wrong: a site whose direct launch cannot be traced still runs, through the custom op, and says why."""
    import torch.nn as nn

    import norm_fusion_inductor as nfi
    from norm_fusion_inductor import selection

    from .helpers import OLDER_FUSIONS, LlamaRMSNorm, rel_err

    def choose(site, config):
        return selection.Choice(True, "fused_triton", "test", plan=("in_loop", norm_gemm._INTERPRETER_CONFIG))

    def broken_trace(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(selection, "choose", choose)
    monkeypatch.setattr(ops, "trace_direct_launch", broken_trace)
    torch.manual_seed(0)
    model = nn.Sequential(LlamaRMSNorm(32), nn.Linear(32, 16))
    x = torch.randn(4, 32)
    torch._dynamo.reset()
    nfi.clear_reports()
    out = torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"fusions": OLDER_FUSIONS}})(x)
    assert rel_err(out, model(x)) < 1e-5
    [site] = nfi.reports()
    assert site.rewritten
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
    plan = ("in_loop", {})
    fused = selection.Choice(True, "fused_triton", "", plan)
    reason = _direct_launch_rejection((x, None, w, None, 1e-6, False), fused, config)
    if launch == "op":
        assert reason == "launch='op'"
        return
    assert reason is None
    assert _direct_launch_rejection((x, None, w, None, 1e-6, False), selection.Choice(True, "fused_triton", ""),
                                    config) == "no tuned kernel plan"
    assert _direct_launch_rejection((x, None, w, None, eps_node, False), fused, config) == "eps is a graph tensor"
    x.meta["val"] = torch.empty(10, 16)[1:9]  # starts 64 bytes in: aligned
    assert _direct_launch_rejection((x, None, w, None, 1e-6, False), fused, config) is None
    x.meta["val"] = torch.empty(9, 17).view(-1)[1:129].view(8, 16)  # starts 4 bytes in
    assert "16-byte aligned" in _direct_launch_rejection((x, None, w, None, 1e-6, False), fused, config)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("prologue", ["gluon_in_loop", "gluon_pre_pass"])
def test_gluon_plan_traces_to_its_launch_op(fake_cuda, norm, prologue):
    """A Gluon plan: Inductor cannot emit the kernel, so the trace holds one call of the thin launch op (made
    functional: auto_functionalized), with W·γ (and u, v) as graph ops around it; the pre-pass's row kernel is
    still a Triton launch."""
    from norm_fusion_inductor.kernels import norm_gemm_gluon

    M, K, N = 300, 256, 512
    x, g, w, b = fake_cuda(3, 100, K), fake_cuda(K), fake_cuda(N, K), fake_cuda(N)
    args = (x, g, w, b, 1e-5, False) if norm == "rms" else (x, g, g, w, b, 1e-5, False)
    gm = ops.trace_direct_launch(norm, args, (prologue, norm_gemm_gluon.CONFIGS[0]))
    calls = [n for n in gm.graph.nodes if "gluon_norm_gemm" in str(n.args[0] if n.args else n.target)]
    assert len(calls) == 1, gm.graph
    assert [name for name, _ in _launches(gm)] == ([] if prologue == "gluon_in_loop" else ["row_stats_kernel"])
    targets = {n.target for n in gm.graph.nodes}
    assert torch.ops.aten.mm.default not in targets and torch.ops.aten.addmm.default not in targets
    outputs = gm.graph.find_nodes(op="output")[0].args[0]
    assert [tuple(o.meta["val"].shape) for o in outputs] == [(M, N)] + [(3, 100, 1)] * (1 if norm == "rms" else 2)


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
    from norm_fusion_inductor.kernels import epilogue_gemm as eg
    from norm_fusion_inductor.patterns.regrouped_norm import insert_traced

    monkeypatch.setattr(eg, "_num_sms", lambda index: 132)
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
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    from triton.runtime.jit import JITFunction

    from norm_fusion_inductor import regrouped
    from norm_fusion_inductor.kernels import common
    from norm_fusion_inductor.kernels import epilogue_gemm as eg
    from norm_fusion_inductor.patterns.regrouped_norm import insert_traced

    interpreted = {}  # (module, name) -> the interpreter's function; compiled ones while tracing
    for module in (eg, common):
        for name, kernel in vars(module).items():
            if hasattr(kernel, "fn") and type(kernel).__name__ == "InterpretedFunction":
                interpreted[module, name] = kernel
                monkeypatch.setattr(module, name, JITFunction(kernel.fn))
    if not interpreted:
        pytest.skip("needs the Triton interpreter (the CPU suite's conftest turns it on)")
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
    for (module, name), kernel in interpreted.items():
        monkeypatch.setattr(module, name, kernel)
    for node in graph.nodes:
        if node.target is HOP:
            traced = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])  # (wrapped with its launch options)
            monkeypatch.setitem(kernel_side_table.id_to_kernel, node.kwargs["kernel_idx"],
                                interpreted[eg, traced.fn.__name__])
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    wide = {k: v.double() for k, v in reals.items()}
    args = [wide[n] if n is not None else None for n in spec["args"]]
    row_norm, activation, write_aux, stats = spec["flags"]
    head = spec.get("head", False)
    epilogue = regrouped._epilogue(row_norm, activation, write_aux, stats, args[2] is not None, args[3] is not None,
                                   "none", D if head else 0, head)
    head_norm = eg.HeadNorm(wide["head_weight"], 1e-6, wide["cos"], wide["sin"]) if head else None
    refs = regrouped.reference(*args, epilogue, False, None, head_norm)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *s, **k: real_empty(*s, **k).fill_(float("nan"))
                        if k.get("dtype", torch.float32).is_floating_point else real_empty(*s, **k))
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
