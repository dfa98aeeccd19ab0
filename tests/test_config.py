"""Configuration, entry points, pass composition, the FX graph cache and logging."""

import logging
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from torch._dynamo.utils import counters
from torch._inductor.custom_graph_pass import CustomGraphPass

import norm_fusion_inductor as nfi
from norm_fusion_inductor.report import FROM_CACHE
from norm_fusion_inductor.passes import NormFusionPass

from .helpers import OLDER_FUSIONS, LlamaRMSNorm, rel_err


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(LlamaRMSNorm(32), nn.Linear(32, 16))


ALWAYS = {"norm_fusion": {"policy": "always"}}


# --- configuration errors name the option ----------------------------------------------------------------------

def test_default_families_and_every_family_can_be_chosen():
    """Every family is on by default, regrouped normalization (which takes the pre-norm sites) first. The default
    margin is 1.05."""
    assert nfi.NormFusionConfig().fusions == nfi.FUSIONS == nfi.KNOWN_FUSIONS == (
        "regrouped_norm", "matmul_norm", "norm_attention")
    assert nfi.NormFusionConfig(fusions=["matmul_norm"]).fusions == ("matmul_norm",)
    assert nfi.NormFusionConfig(fusions=OLDER_FUSIONS).fusions == OLDER_FUSIONS
    assert nfi.NormFusionConfig().min_speedup == 1.05


@pytest.mark.parametrize("removed", ["rms_norm_matmul", "layer_norm_matmul"])
def test_removed_fusion_is_named_with_what_replaced_it(removed):
    """The pre-norm k-loop prologues were removed: a config that still asks for one fails at once, naming it and
    the family that takes its sites now (not as an unknown name), also through the options entry point."""
    with pytest.raises(ValueError, match=f"'{removed}' no longer exists: .*'regrouped_norm'"):
        nfi.NormFusionConfig(fusions=("regrouped_norm", removed))
    with pytest.raises(ValueError, match=f"'{removed}' no longer exists"):
        nfi.inductor_options(fusions=[removed])


def test_launch_option_is_checked():
    assert nfi.NormFusionConfig().launch == "direct"
    with pytest.raises(ValueError, match="'launch'"):
        nfi.NormFusionConfig(launch="inline")


def test_unknown_option_is_named():
    with pytest.raises(ValueError, match="'polcy'"):
        nfi.NormFusionConfig.from_any({"polcy": "auto"})
    with pytest.raises(ValueError, match="unknown fusion 'matmul_layer_norm'"):
        nfi.NormFusionConfig(fusions=("matmul_layer_norm",))


def test_wrong_types_and_values_are_named():
    with pytest.raises(TypeError, match="'min_speedup' must be int or float"):
        nfi.NormFusionConfig(min_speedup="2")
    with pytest.raises(TypeError, match="'min_speedup' must be a number, got bool"):
        nfi.NormFusionConfig(min_speedup=True)
    with pytest.raises(TypeError, match="'compiled_min_speedup' must be int or float"):
        nfi.NormFusionConfig(compiled_min_speedup="1.05")
    with pytest.raises(ValueError, match="'compiled_min_speedup' must be > 0"):
        nfi.NormFusionConfig(compiled_min_speedup=0)
    with pytest.raises(TypeError, match="'log' must be bool"):
        nfi.NormFusionConfig(log=1)
    with pytest.raises(TypeError, match="'compiled_check' must be bool"):
        nfi.NormFusionConfig(compiled_check="yes")
    with pytest.raises(ValueError, match="'policy' must be one of"):
        nfi.NormFusionConfig(policy="fastest")
    with pytest.raises(TypeError, match="dict or NormFusionConfig"):
        nfi.inductor_options(["auto"])


def test_backend_rejects_unknown_option_at_compile():
    compiled = torch.compile(small_model(), backend="norm_fusion", options={"norm_fusion": {"bogus": 1}})
    with pytest.raises(Exception, match="bogus"):
        compiled(torch.randn(4, 32))
    torch._dynamo.reset()


# --- entry points ------------------------------------------------------------------------------------------------

def test_backend_entry_point_works_without_import():
    """`backend="norm_fusion"` after `pip install`, in a process that never imports the package itself."""
    code = (
        "import sys, torch\n"
        "assert 'norm_fusion_inductor' not in sys.modules\n"
        "m = torch.nn.Sequential(torch.nn.RMSNorm(16), torch.nn.Linear(16, 8))\n"
        "x = torch.randn(4, 16)\n"
        "out = torch.compile(m, backend='norm_fusion', options={'norm_fusion': {'policy': 'always'}})(x)\n"
        "import norm_fusion_inductor as nfi\n"
        "assert [s.rewritten for s in nfi.reports()] == [True], nfi.reports()\n"
        "assert torch.allclose(out, m(x), atol=1e-5)\n"
        "print('ok')\n"
    )
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert result.stdout.strip().endswith("ok"), result.stderr[-3000:]


class Recorder(CustomGraphPass):
    """Records, per graph, how many fused ops our pass left in it (any family's) and whether max_autotune is on."""

    def __init__(self):
        self.calls = []

    def __call__(self, graph):
        self.calls.append((str(graph).count("torch.ops.norm_fusion."), torch._inductor.config.max_autotune))

    def uuid(self):
        return "recorder-v1"


def test_backend_mode_and_user_pass_in_options():
    """mode= reaches Inductor; a joint_custom_post_pass given in options runs after ours."""
    torch._dynamo.reset()
    user_pass = Recorder()
    model, x = small_model(), torch.randn(4, 32)
    out = torch.compile(model, backend="norm_fusion", options={
        **ALWAYS, "joint_custom_post_pass": user_pass, "max_autotune": True})(x)
    assert rel_err(out, model(x)) < 1e-5
    assert user_pass.calls == [(1, True)]  # saw our rewrite, and the Inductor option was applied
    torch._dynamo.reset()
    compiled = torch.compile(small_model(), backend="norm_fusion", mode="reduce-overhead")
    assert rel_err(compiled(x), small_model()(x)) < 1e-5
    torch._dynamo.reset()


def test_backend_starts_inductors_compile_workers_before_compiling(monkeypatch):
    """As Inductor's own backend does: the workers take seconds to come up, and until then Inductor compiles
    every kernel on the main thread. The warm-up must come before the graph reaches Inductor."""
    from torch._inductor import async_compile, compile_fx

    events = []
    monkeypatch.setattr(async_compile, "maybe_warm_pool", lambda: events.append("warm"))
    real = compile_fx.compile_fx
    monkeypatch.setattr(compile_fx, "compile_fx", lambda *a, **k: events.append("compile") or real(*a, **k))
    torch._dynamo.reset()
    model, x = small_model(), torch.randn(4, 32)
    assert rel_err(torch.compile(model, backend="norm_fusion")(x), model(x)) < 1e-5
    assert events[:2] == ["warm", "compile"]
    torch._dynamo.reset()


def test_inductor_options_compose_with_existing_pass():
    user_pass = Recorder()
    with torch._inductor.config.patch(joint_custom_post_pass=user_pass):
        opts = nfi.inductor_options(policy="always")
        npass = opts["joint_custom_post_pass"]
        assert isinstance(npass, NormFusionPass) and npass.chained is user_pass
        torch._dynamo.reset()
        model, x = small_model(), torch.randn(4, 32)
        out = torch.compile(model, options=opts)(x)  # the stock Inductor backend
    assert rel_err(out, model(x)) < 1e-5
    assert user_pass.calls and user_pass.calls[0][0] == 1
    # installing twice does not run the families twice
    with torch._inductor.config.patch(opts):
        again = nfi.inductor_options(policy="always")["joint_custom_post_pass"]
    assert again.chained is user_pass
    torch._dynamo.reset()


def test_inductor_options_install_the_pre_grad_pass_too():
    """The attention family runs before autograd: a pass of its own, chained in front of the user's, with its own
    cache id."""
    from norm_fusion_inductor.passes import NormFusionPreGradPass

    user_pass = Recorder()
    with torch._inductor.config.patch(pre_grad_custom_pass=user_pass):
        opts = nfi.inductor_options(policy="always")
    pre = opts["pre_grad_custom_pass"]
    assert isinstance(pre, NormFusionPreGradPass) and pre.chained is user_pass
    assert pre.uuid() != opts["joint_custom_post_pass"].uuid()
    with torch._inductor.config.patch(opts):
        assert nfi.inductor_options()["pre_grad_custom_pass"].chained is user_pass


def test_enabled_context_manager():
    torch._dynamo.reset()
    nfi.clear_reports()
    model, x = small_model(), torch.randn(4, 32)
    with nfi.enabled(policy="always"):
        out = torch.compile(model)(x)
    assert [s.rewritten for s in nfi.reports()] == [True]
    assert rel_err(out, model(x)) < 1e-5
    torch._dynamo.reset()


# --- the FX graph cache ------------------------------------------------------------------------------------------

def test_uuid_tracks_config_and_chained_pass():
    a, b = NormFusionPass(nfi.NormFusionConfig()), NormFusionPass(nfi.NormFusionConfig())
    assert a.uuid() == b.uuid() and a.uuid() is not None
    assert NormFusionPass(nfi.NormFusionConfig(policy="never")).uuid() != a.uuid()
    assert NormFusionPass(chained=Recorder()).uuid() != a.uuid()
    assert NormFusionPass(chained=lambda g: None).uuid() is None  # an opaque user pass: Inductor must bypass


def test_a_pending_measurement_keeps_the_fx_graph_cache_missing_only_with_revisit_pending(tmp_path, monkeypatch):
    """A measurement a budget left pending changes the pass's uuid (Inductor's FX graph cache misses, the next
    compile completes it) only where ``revisit_pending`` asks for that; by default a warm compile is served from
    the cache."""
    from norm_fusion_inductor import selection

    monkeypatch.setattr(selection, "_MEMORY", {})
    default = nfi.NormFusionConfig(cache_dir=str(tmp_path))
    revisit = nfi.NormFusionConfig(cache_dir=str(tmp_path), revisit_pending=True)
    before = NormFusionPass(default).uuid(), NormFusionPass(revisit).uuid()
    assert before[0] != before[1]
    selection._disk_cached("a site's key", default, lambda: {"incomplete": True})
    assert selection.pending_token(default)
    assert NormFusionPass(default).uuid() == before[0]
    assert NormFusionPass(revisit).uuid() != before[1]
    with pytest.raises(TypeError, match="revisit_pending"):
        nfi.NormFusionConfig(revisit_pending=1)


def test_fx_graph_cache_is_not_bypassed(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    counters.clear()
    model, x = small_model(), torch.randn(4, 32)
    with torch._inductor.config.patch(force_disable_caches=False, fx_graph_cache=True, fx_graph_remote_cache=False):
        for _ in range(2):
            torch._dynamo.reset()
            out = torch.compile(model, backend="norm_fusion", options=ALWAYS)(x)
    assert rel_err(out, model(x)) < 1e-5
    assert counters["inductor"]["fxgraph_cache_bypass"] == 0
    assert counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"] >= 1
    torch._dynamo.reset()


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_cached_graph_still_reports_its_sites(tmp_path, monkeypatch, caplog, train):
    """A graph that Inductor's AOTAutograd cache serves skips the joint pass (seen on the GPU machine: a warm
    compile in a new process took 0.2 s and reported no sites). The backend keeps each graph's site records and
    replays them, marked, when the pass did not run; here the second compile skips the pass as such a hit does."""
    from norm_fusion_inductor import passes

    options = {"norm_fusion": {"policy": "always", "cache_dir": str(tmp_path), "log": True}}
    model, x = small_model(), torch.randn(4, 32, requires_grad=train)
    model.train(train)
    runs = []
    for skip in (False, True):
        if skip:
            monkeypatch.setattr(passes.NormFusionPass, "__call__", lambda self, graph: None)
        torch._dynamo.reset()
        nfi.clear_reports()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="norm_fusion_inductor"):
            torch.compile(model, backend="norm_fusion", options=options)(x)
        runs.append((nfi.reports(), [r.getMessage() for r in caplog.records]))
    (first, _), (second, lines) = runs
    assert first and any(s.rewritten for s in first) and not any(FROM_CACHE in s.reason for s in first)
    assert [(s.fusion, s.rewritten, s.node, s.shape) for s in second] == \
        [(s.fusion, s.rewritten, s.node, s.shape) for s in first]
    assert all(s.reason == f.reason + FROM_CACHE for s, f in zip(second, first))
    assert sum(FROM_CACHE.strip() in line for line in lines) == len(first)
    # another graph (other input shapes) has no kept records: nothing is made up
    torch._dynamo.reset()
    nfi.clear_reports()
    torch.compile(model, backend="norm_fusion", options=options)(torch.randn(8, 32, requires_grad=train))
    assert nfi.reports() == []
    torch._dynamo.reset()


# --- logging -------------------------------------------------------------------------------------------------------

def test_logs_every_site_with_reason(monkeypatch, caplog):
    """NORM_FUSION_LOG=1 logs every site, the one rewritten and the one left unfused, each with its reason, and
    once per graph the pass's seconds by phase."""
    monkeypatch.setenv("NORM_FUSION_LOG", "1")
    torch._dynamo.reset()
    with caplog.at_level(logging.INFO, logger="norm_fusion_inductor"):
        torch.compile(TwoNorms(), backend="norm_fusion", options=ALWAYS)(torch.randn(2, 3, 32))
    lines = [r.getMessage() for r in caplog.records if r.name == "norm_fusion_inductor"]
    timings = [line for line in lines if "joint stage: pass " in line]
    lines = [line for line in lines if line not in timings]
    assert len(lines) == 2 and len(timings) == 1, (lines, timings)
    assert any("regrouped_norm REWRITTEN" in line and "read the stream with the norm in their epilogue" in line
               for line in lines), lines
    assert any("regrouped_norm not rewritten" in line and "also used by aten.cat.default" in line
               for line in lines), lines
    torch._dynamo.reset()


def test_log_graph_prints_rewritten_graph(caplog):
    torch._dynamo.reset()
    with caplog.at_level(logging.INFO, logger="norm_fusion_inductor"):
        torch.compile(small_model(), backend="norm_fusion",
                      options={"norm_fusion": {"policy": "always", "log_graph": True}})(torch.randn(4, 32))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "REWRITTEN" in text and "after norm_fusion" in text and "norm_fusion.epilogue_gemm" in text
    torch._dynamo.reset()


# --- explain -------------------------------------------------------------------------------------------------------

class TwoNorms(nn.Module):
    """One site that fuses (regrouped, by default) and one that cannot (its normalized tensor is also part of the
    output): the regrouped family declines it and its record says why."""

    def __init__(self):
        super().__init__()
        self.n1, self.p1 = LlamaRMSNorm(32), nn.Linear(32, 32)
        self.n2, self.p2 = nn.LayerNorm(32), nn.Linear(32, 16)

    def forward(self, x):
        h = self.p1(self.n1(x))
        g = self.n2(h)
        return torch.cat([self.p2(g), g], -1)


def test_explain_reports_every_site_as_data_and_table():
    model, x = TwoNorms(), torch.randn(2, 3, 32)
    for train in (False, True):
        result = nfi.explain(model, x, train=train, policy="always", fusions=nfi.FUSIONS)
        assert [(s.fusion, s.rewritten) for s in result.sites] == [("regrouped_norm", True),
                                                                   ("regrouped_norm", False)]
        reason = result.not_rewritten[0].reason
        assert reason == "the normalized tensor is also used by aten.cat.default, so it would still be written", reason
        text = str(result)
        assert text.startswith("1 of 2 normalization sites") and "| no | unfused | the normalized tensor" in text
    torch._dynamo.reset()


def test_kernel_tuning_is_one_record_in_the_pass_uuid():
    """The kernels' measured variant choices live in one frozen record: an override is scoped, names are checked,
    and the pass's uuid changes with it (the FX graph cache does not serve a graph built under other choices)."""
    import dataclasses

    from norm_fusion_inductor.kernels import tuning

    pass_ = nfi.NormFusionPass(nfi.NormFusionConfig())
    before, uuid = tuning.current(), pass_.uuid()
    with tuning.override(attention_tma=not before.attention_tma) as changed:
        assert tuning.current() is changed and changed.attention_tma != before.attention_tma
        assert pass_.uuid() != uuid
    assert tuning.current() is before and pass_.uuid() == uuid
    with pytest.raises(TypeError):
        with tuning.override(no_such_variant=True):
            pass
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.attention_tma = True
