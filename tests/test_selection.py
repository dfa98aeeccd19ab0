"""The per-site choice: policies, the measured rule (POST_NORM_MIN_SPEEDUP, min_kernel_ms, CUDA graphs), the
compiled check and the disk cache, for the post-norm sites (sites.PostNormSite) and the attention sites. The
measurement itself needs a GPU (test_gpu.py); here it is replaced by recorded numbers."""

import dataclasses
import time
import json

import pytest
import torch

from norm_fusion_inductor import selection, sites, timing
from norm_fusion_inductor.config import NormFusionConfig
from norm_fusion_inductor.kernels import epilogue_gemm as eg
from norm_fusion_inductor.kernels import tuning

from .helpers import interpreter

CUDA_SITE = sites.PostNormSite(M=262144, K=1024, N=256, dtype=torch.bfloat16, device=torch.device("cuda", 0),
                               has_norm_weight=True, has_bias=False)
CPU_SITE = sites.PostNormSite(M=64, K=32, N=16, dtype=torch.float32, device=torch.device("cpu"),
                              has_norm_weight=True, has_bias=False)
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8}


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """Pretend to be on an sm_90 GPU whose measurements are the given numbers; count measurements."""
    calls = []
    numbers = {}
    monkeypatch.setattr(selection, "_static_reason", lambda site: None)
    monkeypatch.setattr(selection, "_key", lambda site: f"{site.M}x{site.K}x{site.N}")
    monkeypatch.setattr(selection, "_MEMORY", {})

    def fake_measure(site):
        calls.append(site)
        return dict(numbers)

    monkeypatch.setattr(selection, "_measure", fake_measure)
    return numbers, calls, NormFusionConfig(cache_dir=str(tmp_path))


def test_policies_without_measurement():
    assert not selection.choose(CPU_SITE, NormFusionConfig()).fused
    assert "device 'cpu'" in selection.choose(CPU_SITE, NormFusionConfig()).reason
    always = selection.choose(CPU_SITE, NormFusionConfig(policy="always"))
    assert always.fused and always.implementation == "reference" and always.plan is None
    assert selection.choose(CPU_SITE, NormFusionConfig(policy="never")).reason == "policy=never"


def test_measured_rule(measured):
    """Fused where the kernel beats the unfused lower bound (cuBLAS + a copy of the matmul's output, half a copy
    more per residual read) by POST_NORM_MIN_SPEEDUP, which stays above the default min_speedup."""
    numbers, calls, config = measured
    numbers.update(fused_ms=0.299, mm_ms=0.243, copy_ms=0.252)  # 1.66x the bound
    choice = selection.choose(CUDA_SITE, config)
    assert choice.fused and choice.implementation == "fused_triton" and "0.2990" in choice.reason
    assert "0.4950" in choice.reason and "config tuned at run time" in choice.reason  # no config measured
    # beats the bound by 1.078x: within POST_NORM_MIN_SPEEDUP, unfused even at the default min_speedup of 1.05
    # (the regrouped rewrite's margin)
    numbers.update(fused_ms=1.038, mm_ms=0.867, copy_ms=0.252)
    other = dataclasses.replace(CUDA_SITE, N=128)
    assert config.min_speedup < 1.078 < selection.POST_NORM_MIN_SPEEDUP
    assert not selection.choose(other, config).fused
    assert selection.choose(other, dataclasses.replace(config, policy="always")).fused  # "always" measures nothing
    # a residual: 1.5 copies of the output. LayerNorm 262144x512x1024, measured at compile time (fused 0.876,
    # cuBLAS 0.499), ran 11 % slower fused when the copy was timed on the copy engines (0.397)
    post = dataclasses.replace(CUDA_SITE, K=512, N=1024, norm="ln", has_residual=True)
    numbers.update(fused_ms=0.876, mm_ms=0.499, copy_ms=0.252)
    choice = selection.choose(post, config)
    assert not choice.fused and "x 1.5 (residuals)" in choice.reason and "0.8770" in choice.reason


def test_residuals_count_in_the_bound(measured):
    """Each residual the unfused norm reads (before it, and the one added after it) is half a copy more: the same
    kernel time loses without residuals and wins with both."""
    numbers, calls, config = measured
    numbers.update(fused_ms=0.6, mm_ms=0.45, copy_ms=0.2)
    bare = dataclasses.replace(CUDA_SITE, M=65536)  # bound 0.65 < 0.6 · 1.1
    assert not selection.choose(bare, config).fused
    both = dataclasses.replace(CUDA_SITE, M=32768, has_residual=True, has_residual_out=True)  # bound 0.85
    choice = selection.choose(both, config)
    assert choice.fused and "x 2.0 (residuals)" in choice.reason and len(calls) == 2


def test_copy_is_an_sm_kernel():
    """The bound's copy must not be Tensor.copy_ (a memcpy node on the copy engines when graph-captured)."""
    src, dst = torch.randn(64, 32), torch.empty(64, 32)
    assert torch.equal(timing.sm_copy(dst, src), -src)
    import inspect

    assert ".copy_(" not in inspect.getsource(selection)


def test_short_kernels_through_the_op_stay_unfused_unless_cudagraphs(measured):
    numbers, _, config = measured
    numbers.update(fused_ms=0.047, mm_ms=0.034, copy_ms=0.033)
    small = dataclasses.replace(CUDA_SITE, M=65536, K=512)
    assert selection.choose(small, config).fused  # launched from Inductor's code: no host cost to fear
    op_config = NormFusionConfig(launch="op", cache_dir=config.cache_dir)
    choice = selection.choose(small, op_config)
    assert not choice.fused and "min_kernel_ms" in choice.reason
    with torch._inductor.config.patch({"triton.cudagraphs": True}):
        assert selection.choose(small, op_config).fused


def test_static_reasons_decline_without_measuring(monkeypatch, tmp_path):
    """What the kernel cannot take whatever the layout is declined before anything is timed: rows wider than the
    post-norm piece holds (BERT-base's attention-output post-norm, 16384x768x768 + residual: the reason names the
    width and the rewrite that takes it), rows that are not 16-byte aligned, other dtypes, pre-Hopper GPUs; policy
    "always" takes the reference op there. A 256-wide site has no static reason."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(selection, "_MEMORY", {})
    monkeypatch.setattr(selection, "_measure", lambda site: pytest.fail("measured"))
    config = NormFusionConfig(cache_dir=str(tmp_path))
    bert = dataclasses.replace(CUDA_SITE, M=16384, K=768, N=768, norm="ln", has_residual=True)
    choice = selection.choose(bert, config)
    assert not choice.fused and "N=768 > 256" in choice.reason and "regrouped_norm" in choice.reason
    always = selection.choose(bert, dataclasses.replace(config, policy="always"))
    assert always.fused and always.implementation == "reference" and "N=768 > 256" in always.reason
    assert "16-byte" in selection._static_reason(dataclasses.replace(CUDA_SITE, K=1001))
    assert "16-byte" in selection._static_reason(dataclasses.replace(CUDA_SITE, N=36))  # 72 bytes
    assert selection._static_reason(dataclasses.replace(CUDA_SITE, N=24)) is None  # 48 bytes: a 64-wide tile
    assert "dtype" in selection._static_reason(dataclasses.replace(CUDA_SITE, dtype=torch.float64))
    assert "32-bit" in selection._static_reason(dataclasses.replace(CUDA_SITE, M=2 ** 24))
    assert selection._static_reason(CUDA_SITE) is None
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert "sm_90" in selection._static_reason(CUDA_SITE)


@interpreter
def test_interpreter_declines_rows_the_kernel_would_not_take():
    """Under the Triton interpreter (the CPU suite's kernels) a consumer whose output rows are not 16-byte aligned
    is left with that reason, as on the GPU, instead of being counted as rewritten while its op runs the torch
    reference (a 37-wide lm_head: 148-byte fp32 rows)."""
    args = dict(row_norm="rms", activation="none", write_aux=False, stats="none", residual=False, w_kn=False,
                norm_bytes=0, config=NormFusionConfig(policy="always"))
    odd = selection.choose_epilogue_gemm(24, 37, 64, torch.float32, torch.device("cpu"), **args)
    even = selection.choose_epilogue_gemm(24, 36, 64, torch.float32, torch.device("cpu"), **args)
    assert not odd.fused and "N=37 rows are not 16-byte aligned" in odd.reason
    assert even.fused and even.implementation == "regrouped_triton"


def test_host_time_is_measured_without_the_python_dispatcher():
    """Inductor's compile runs the pass under the Python dispatcher, which inflates eager host time; the compiled
    graph does not run under it, so the host measurement turns it off."""
    from torch._dispatch.python import enable_python_dispatcher

    key = torch._C.DispatchKey.PythonDispatcher
    seen = []
    with enable_python_dispatcher():
        ms = selection.host_ms(lambda: seen.append(torch._C._dispatch_tls_is_dispatch_key_included(key)),
                                calls=5, batches=2, sync=lambda: None)
        assert torch._C._dispatch_tls_is_dispatch_key_included(key)  # restored after
    assert seen == [False] * 11 and ms >= 0


def test_config_is_kept_with_the_choice(measured, monkeypatch):
    numbers, calls, config = measured
    numbers.update(fused_ms=0.3, mm_ms=0.2, copy_ms=0.3, plan=CONFIG)
    choice = selection.choose(CUDA_SITE, config)
    assert choice.plan == CONFIG and "config 128x256x64" in choice.reason
    monkeypatch.setattr(selection, "_MEMORY", {})  # a new process: the config comes back from disk
    assert selection.choose(CUDA_SITE, config).plan == CONFIG and len(calls) == 1
    # policy "always" measures nothing: it takes the measured site's config, and tunes an unmeasured site's once
    tuned = []
    monkeypatch.setattr(selection, "_tune", lambda site: tuned.append(site) or {"plan": CONFIG})
    always = NormFusionConfig(policy="always", cache_dir=config.cache_dir)
    assert selection.choose(CUDA_SITE, always).plan == CONFIG and tuned == []
    other = dataclasses.replace(CUDA_SITE, N=128)
    assert selection.choose(other, always).plan == CONFIG
    assert selection.choose(other, always).plan == CONFIG and tuned == [other] and len(calls) == 1

    def broken(site):
        raise RuntimeError("no GPU")

    monkeypatch.setattr(selection, "_tune", broken)  # no config tuned: fused, the op tunes at run time
    failed = selection.choose(dataclasses.replace(CUDA_SITE, N=64), always)
    assert failed.fused and failed.plan is None and "tuning failed: RuntimeError: no GPU" in failed.reason


def test_plan_name():
    assert selection._plan_name(CONFIG) == "128x256x64"
    assert selection._plan_name(None) == "tuned at run time"


def test_choices_are_cached_in_memory_and_on_disk(measured, monkeypatch):
    numbers, calls, config = measured
    numbers.update(fused_ms=0.3, mm_ms=0.2, copy_ms=0.3)
    selection.choose(CUDA_SITE, config)
    selection.choose(CUDA_SITE, config)
    assert len(calls) == 1
    saved = json.loads((selection._cache_file(config)).read_text())
    assert saved["262144x1024x256"]["fused_ms"] == 0.3
    monkeypatch.setattr(selection, "_MEMORY", {})  # a new process: read back from disk, no new measurement
    assert selection.choose(CUDA_SITE, config).fused and len(calls) == 1


def test_cache_key_tells_the_sites_apart():
    """The choice cache's key: every field of the site (the epilogue's pieces change the kernel and its config),
    M by power-of-two bucket, and the kernel tuning record; not the M within a bucket."""
    site = dataclasses.replace(CPU_SITE, M=1000)
    key = selection._key(site)
    assert selection._key(dataclasses.replace(site, M=1020)) == key
    others = [dataclasses.replace(site, M=4000), dataclasses.replace(site, K=64), dataclasses.replace(site, N=32),
              dataclasses.replace(site, dtype=torch.float16), dataclasses.replace(site, has_norm_weight=False),
              dataclasses.replace(site, has_bias=True), dataclasses.replace(site, norm="ln"),
              dataclasses.replace(site, has_norm_bias=True), dataclasses.replace(site, weight_kn=True),
              dataclasses.replace(site, has_residual=True), dataclasses.replace(site, write_z=True),
              dataclasses.replace(site, has_residual_out=True)]
    assert len({key, *map(selection._key, others)}) == len(others) + 1
    with tuning.override(epilogue_load_after_mainloop=not tuning.current().epilogue_load_after_mainloop):
        assert selection._key(site) != key


@pytest.mark.parametrize("fields", [
    dict(norm="rms", has_bias=True, has_residual=True, write_z=True),
    dict(norm="ln", has_norm_bias=True, has_residual_out=True, weight_kn=True),
    dict(norm="ln", has_norm_weight=False, has_bias=True, has_residual=True, has_residual_out=True),
], ids=["rms-bias-residual-z", "ln-residual_out-conv1d", "ln-weightless-both"])
@interpreter
def test_tune_returns_the_config_the_kernel_tuned(fields, monkeypatch):
    """_tune runs the fused kernel on the site's operands and returns the config it tuned (epilogue_gemm.tuned_for
    with the site's epilogue): where the two disagreed on the epilogue, no config would come back and the site
    would lose its direct launch. On the CPU, the interpreter's one config."""
    monkeypatch.setattr(eg, "_TUNED", {})
    site = dataclasses.replace(CPU_SITE, **fields)
    plan = selection._tune(site)["plan"]
    assert plan == eg._configs(torch.empty(site.M, site.K), eg.Epilogue(post_norm=site.norm), site.N)[0]
    assert len(eg._TUNED) == 1


def test_failed_measurement_keeps_unfused(measured, monkeypatch):
    _, _, config = measured

    def broken(site):
        raise RuntimeError("no graph capture here")

    monkeypatch.setattr(selection, "_measure", broken)
    choice = selection.choose(CUDA_SITE, config)
    assert not choice.fused and "measurement failed" in choice.reason


ATTENTION_SITE = selection.AttentionSite(batch=768, q_len=512, kv_len=128, heads=4, head_dim=128,
                                         dtype=torch.bfloat16, device=torch.device("cuda", 0), activation="silu",
                                         has_ln_weight=True, has_ln_bias=True, has_rms_weight=True)


@pytest.fixture
def attention_measured(monkeypatch, tmp_path):
    """Pretend to be on a GPU: the in-process bound measurement returns ``bound``, the child process
    ``child`` (or fails while child["compiled_ms"] is None); the sites it was started for are recorded."""
    bound = {"fused_ms": 1.12, "attention_ms": 1.37, "copy_ms": 0.19}
    child = {"fused_ms": 3.74, "compiled_ms": None, "sites": []}
    monkeypatch.setattr(selection, "_attention_kernel_reason", lambda site: None)
    monkeypatch.setattr(selection, "_key", lambda site: f"attention train={site.train}")
    monkeypatch.setattr(selection, "_MEMORY", {})
    monkeypatch.setattr(selection, "_measure_attention", lambda site: dict(bound))

    def measure_compiled_block(site):
        child["sites"].append(site)
        if child["compiled_ms"] is None:
            raise RuntimeError("child process failed")
        return {"fused_ms": child["fused_ms"], "compiled_ms": child["compiled_ms"]}

    monkeypatch.setattr(selection, "_measure_compiled_block", measure_compiled_block)
    return bound, child, NormFusionConfig(cache_dir=str(tmp_path))


@pytest.mark.parametrize("fused_ms, compiled_ms, fused", [(3.74, 6.9, True), (3.74, 3.88, False),
                                                         (3.531, 3.884, False), (3.74, None, False)])
def test_training_attention_site_is_measured_against_the_compiled_block(attention_measured, fused_ms, compiled_ms,
                                                                        fused):
    """Training: the lower bound is no bound (eager autograd), the compiled block decides, with
    compiled_min_speedup (the recommendation block on the H200, 2026-11-30: 3.74 fused vs 3.88 compiled, 1.04x,
    and 3.531 vs 3.884, 1.10x with the merged backward, stay unfused: fused, the latter's training step ran 2 %
    slower); a failed child process keeps the unfused path."""
    bound, child, config = attention_measured
    child.update(fused_ms=fused_ms, compiled_ms=compiled_ms)
    choice = selection.choose_attention(dataclasses.replace(ATTENTION_SITE, train=True), config)
    assert choice.fused == fused and len(child["sites"]) == 1
    assert choice.reason.startswith("forward + backward") and "compiled block" in choice.reason
    assert "lower bound" not in choice.reason


def test_inference_attention_site_won_on_the_bound_needs_no_child(attention_measured):
    bound, child, config = attention_measured
    choice = selection.choose_attention(ATTENTION_SITE, config)
    assert choice.fused and "lower bound" in choice.reason and child["sites"] == []


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_inference_attention_site_counts_the_op_host_time(attention_measured, cudagraphs):
    """The op launches its kernels from Python: a site whose host time per call exceeds the bound is not won on
    the bound without CUDA graphs (GPU 1.12 ms, host 2.0 ms ≥ 1.37 + 2.5 · 0.19), and is with them."""
    bound, child, config = attention_measured
    bound["host_ms"] = 2.0
    child.update(fused_ms=2.0, compiled_ms=2.1)  # the child's wall times: under the margin
    # config.patch, not monkeypatch: pytest 9's monkeypatch undo deletes a config attribute, breaking dynamo.reset()
    with torch._inductor.config.patch({"triton.cudagraphs": cudagraphs}):
        choice = selection.choose_attention(ATTENTION_SITE, config)
    assert choice.fused == cudagraphs
    assert ("host time per call" in choice.reason) != cudagraphs


def test_inference_attention_site_lost_on_the_bound_asks_the_compiled_block(attention_measured):
    bound, child, config = attention_measured
    bound["fused_ms"] = 1.6  # 1.6 · 1.25 ≥ 1.37 + 2.5 · 0.19
    child.update(fused_ms=1.6, compiled_ms=2.0)
    choice = selection.choose_attention(ATTENTION_SITE, config)
    assert choice.fused and "lower bound" in choice.reason and "compiled" in choice.reason
    assert len(child["sites"]) == 1


def test_child_process_failure_is_reported_and_not_retried(monkeypatch):
    """The real child process, on a machine where it cannot measure (no CUDA here): it starts, imports the package
    from this process's path in a neutral directory, fails with its own error, and is not started again."""
    monkeypatch.setattr(selection, "_key", lambda site: "child test")
    monkeypatch.setattr(selection, "_FAILED", {})
    site = dataclasses.replace(ATTENTION_SITE, batch=1, q_len=4, kv_len=4, heads=2, head_dim=16,
                               device=torch.device("cpu"))
    with pytest.raises(RuntimeError, match="child process failed") as first:
        selection._measure_compiled_block(site)
    assert "ModuleNotFoundError" not in str(first.value) and "No module" not in str(first.value)
    with pytest.raises(RuntimeError, match="not retried"):
        selection._measure_compiled_block(site)


# LayerNorm 65536x2048x256 (numbers of the H200, 2026-11-30): the kernel 0.535 ms against a bound of 0.566
# (cuBLAS 0.438 + copy 0.128), inside POST_NORM_MIN_SPEEDUP; compiled, the fused graph ran 0.478 and the default 0.555
NEAR_MISS = sites.PostNormSite(M=65536, K=2048, N=256, dtype=torch.bfloat16, device=torch.device("cuda", 0),
                               has_norm_weight=True, has_bias=True, norm="ln", has_norm_bias=True)


@pytest.fixture
def compiled_child(measured, monkeypatch):
    numbers, calls, config = measured
    numbers.update(fused_ms=0.535, mm_ms=0.438, copy_ms=0.128)
    child = {"calls": [], "compiled_ms": 0.555}

    def measure_compiled_block(site, config=None):
        child["calls"].append((site, config))
        if child["compiled_ms"] is None:
            raise RuntimeError("child process failed")
        return {"fused_ms": 0.478, "compiled_ms": child["compiled_ms"]}

    monkeypatch.setattr(selection, "_measure_compiled_block", measure_compiled_block)
    monkeypatch.setattr(selection, "_tune", lambda site: {"plan": CONFIG})
    return numbers, child, NormFusionConfig(compiled_check=True, cache_dir=config.cache_dir)


@pytest.mark.parametrize("compiled_ms, fused", [(0.555, True), (0.52, False), (None, False)])
def test_near_miss_is_decided_by_the_compiled_graphs(compiled_child, compiled_ms, fused):
    """compiled_check: a fused kernel that beats the lower bound by less than the margin is compiled both ways in
    a child process; fused with the "always" config if that wins by compiled_min_speedup (0.555 / 0.478 = 1.16),
    unfused if not (0.52 / 0.478 = 1.09) or if the child fails."""
    numbers, child, config = compiled_child
    off = dataclasses.replace(config, compiled_check=False)
    assert not selection.choose(NEAR_MISS, off).fused and child["calls"] == []
    child["compiled_ms"] = compiled_ms
    choice = selection.choose(NEAR_MISS, config)
    assert choice.fused == fused and len(child["calls"]) == 1
    assert child["calls"][0] == (NEAR_MISS, config)
    assert "lower bound" in choice.reason
    if fused:
        assert choice.plan == CONFIG and "0.4780 ms vs 0.5550" in choice.reason
    elif compiled_ms is None:
        assert "not measured" in choice.reason and "child process failed" in choice.reason


@pytest.mark.parametrize("norm", ["ln", "rms"])
def test_site_slower_than_the_bound_asks_no_child(compiled_child, norm):
    """A kernel slower than the bound is unfused without a child, whatever the norm (the Llama layer's sites,
    1.04-1.15x the bound: 188 s of child compiles on the H200, none fused); one faster than the bound, not by the
    margin, is decided by the child."""
    numbers, child, config = compiled_child
    numbers.update(fused_ms=0.60)  # 1.06x the bound (0.566)
    site = dataclasses.replace(NEAR_MISS, norm=norm, has_norm_bias=norm == "ln")
    assert not selection.choose(site, config).fused and child["calls"] == []
    numbers.update(fused_ms=0.55)  # faster than the bound, not by the margin: the child decides
    assert selection.choose(dataclasses.replace(site, N=128), config).fused and len(child["calls"]) == 1


def test_measured_config_is_the_one_policy_always_takes(measured):
    """The config tuned for the measurement is stored as the site's plan, so that a compiled_check child (the
    plugin with policy "always", same cache) does not tune the site again."""
    numbers, _, config = measured
    numbers.update(fused_ms=0.3, mm_ms=0.2, copy_ms=0.3, plan=CONFIG)
    selection.choose(CUDA_SITE, config)
    selection._MEMORY.clear()  # as in a new process: from the disk cache

    def tune(site):
        raise AssertionError("tuned again")

    assert selection._cached(CUDA_SITE, config, "plan", tune)["plan"] == CONFIG


def test_clear_loss_or_win_asks_no_child(compiled_child):
    numbers, child, config = compiled_child
    numbers.update(fused_ms=0.75)  # 1.33x the bound (0.566): unfused without a child
    assert not selection.choose(NEAR_MISS, config).fused
    numbers.update(fused_ms=0.40)  # beats the bound by the margin: fused without a child
    site = dataclasses.replace(NEAR_MISS, N=128)  # another key: measured afresh
    assert selection.choose(site, config).fused and child["calls"] == []


@pytest.mark.parametrize("fields", [
    dict(norm="rms", has_norm_weight=True, has_bias=True, has_residual=True, write_z=True),
    dict(norm="ln", has_norm_weight=True, has_norm_bias=True, has_bias=True, has_residual_out=True),
    dict(norm="ln", has_norm_weight=True, has_norm_bias=True, has_bias=True, weight_kn=True, has_residual=True),
    dict(norm="rms", has_norm_weight=False, has_bias=False),
], ids=["rms-residual-z", "ln-residual-out", "ln-conv1d-residual", "rms-bare"])
def test_child_subgraph_is_the_one_the_plugin_fuses(fields):
    """measure_block.matmul_block, the graph the child compiles both ways, is matched by the plugin at the site's
    shape and kind (on the CPU its rewrite is the reference op), and computes what the site computes."""
    import norm_fusion_inductor as nfi
    from norm_fusion_inductor import measure_block

    torch._dynamo.reset()
    site = sites.PostNormSite(M=64, K=32, N=16, dtype=torch.float32, device=torch.device("cpu"), **fields)
    t = sites.post_norm_operands(site)
    assert all((t[k] is not None) == on for k, on in (("g", site.has_norm_weight), ("beta", site.has_norm_bias),
                                                       ("b", site.has_bias), ("residual", site.has_residual),
                                                       ("residual_out", site.has_residual_out)))
    assert t["w"].shape == ((site.K, site.N) if site.weight_kn else (site.N, site.K))
    args = tuple(t.get(k) for k in ("x", "w", "g", "beta", "b", "residual", "residual_out"))
    block = measure_block.matmul_block(site)
    eager = block(*args)
    nfi.clear_reports()
    options = {"norm_fusion": {"policy": "always", "fusions": ("matmul_norm",)}}  # as the child compiles it
    out = torch.compile(block, backend="norm_fusion", options=options)(*args)
    rewritten = [r for r in nfi.reports() if r.rewritten]
    assert len(rewritten) == 1 and rewritten[0].shape == (64, 32, 16), [r.line() for r in nfi.reports()]
    assert rewritten[0].fusion == "matmul_norm"
    for got, want in zip(*((o,) if torch.is_tensor(o) else o for o in (out, eager))):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert measure_block.matmul_site(dict(dataclasses.asdict(site), dtype=str(site.dtype),
                                          device=str(site.device), kind="matmul")) == site
    torch._dynamo.reset()


def test_entries_another_process_stored_meanwhile_are_kept(measured, monkeypatch):
    """A measurement that runs a child process (_compiled_check) lets the child store its tuned config in the same
    cache file; storing the parent's result must keep it, so that the parent does not tune the config again."""
    numbers, calls, config = measured
    numbers.update(fused_ms=0.3, mm_ms=0.2, copy_ms=0.3)
    path = selection._cache_file(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"before": {"fused_ms": 1.0}}))

    def measure_with_child(site):
        path.write_text(json.dumps({**json.loads(path.read_text()), "child|plan": {"plan": CONFIG}}))
        return dict(numbers)

    monkeypatch.setattr(selection, "_measure", measure_with_child)
    selection.choose(CUDA_SITE, config)
    saved = json.loads(path.read_text())
    assert set(saved) == {"before", "child|plan", "262144x1024x256"}
    assert selection._memory(config)["child|plan"] == {"plan": CONFIG}


def test_an_incomplete_measurement_is_pending_not_kept(monkeypatch, tmp_path):
    """A measurement a budget left incomplete is returned but kept neither in memory nor on disk; its key is
    listed as pending until a complete measurement of it replaces it."""
    monkeypatch.setattr(selection, "_MEMORY", {})
    config = NormFusionConfig(cache_dir=str(tmp_path))
    assert selection._disk_cached("j", config, lambda: {"mm_ms": 0.1, "incomplete": True})["incomplete"]
    memory = selection._memory(config)
    assert "j" not in memory and set(memory[selection.PENDING]) == {"j"}
    assert set(json.loads(selection._cache_file(config).read_text())) == {selection.PENDING}
    whole = {"mm_ms": 0.1, "triton_ms": 0.2}
    assert selection._disk_cached("j", config, lambda: dict(whole)) == whole
    assert json.loads(selection._cache_file(config).read_text()) == {"j": whole}


def test_two_cache_folders_keep_their_own_measurements(monkeypatch, tmp_path):
    """A process compiling with two cache folders measures a key once per folder and writes each folder's
    measurements to its own file only."""
    monkeypatch.setattr(selection, "_MEMORY", {})
    a, b = (NormFusionConfig(cache_dir=str(tmp_path / name)) for name in ("a", "b"))
    assert selection._disk_cached("k", a, lambda: {"mm_ms": 1.0}) == {"mm_ms": 1.0}
    assert selection._disk_cached("k", a, lambda: pytest.fail("measured again")) == {"mm_ms": 1.0}
    assert selection._disk_cached("k", b, lambda: {"mm_ms": 2.0}) == {"mm_ms": 2.0}
    assert selection._disk_cached("j", b, lambda: {"mm_ms": 3.0}) == {"mm_ms": 3.0}
    assert json.loads(selection._cache_file(a).read_text()) == {"k": {"mm_ms": 1.0}}
    assert json.loads(selection._cache_file(b).read_text()) == {"k": {"mm_ms": 2.0}, "j": {"mm_ms": 3.0}}

def test_interleaved_timing_reverses_the_order_every_other_round():
    """The benchmarks' and the child process's timer: each variant once a round, the order reversed every other
    round (a variant's position in the round moved its time on the H200), the median per variant."""
    from norm_fusion_inductor.timing import interleaved_medians

    order = []
    times = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 4.0, 9.0])}
    result = interleaved_medians({"a": "a", "b": "b"}, 3, lambda name: order.append(name) or next(times[name]))
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert result == {"a": 2.0, "b": 5.0}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times kernels on the GPU")
def test_timing_leaves_no_memory_allocated():
    """graph_ms times on a side stream, where cuBLAS allocates a workspace that outlives the stream and counts in
    memory_allocated (empty_cache does not free it): the timings must leave none, or the user's training run
    carries it in its peak memory."""
    from norm_fusion_inductor.timing import graph_ms

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    torch.mm(a, a)  # the current stream's own workspace, before
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(4):
        assert graph_ms(lambda: torch.mm(a, a)) > 0
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before


def test_a_measurement_starts_only_where_one_as_long_as_the_last_fits_the_budget():
    """measure_budget_s bounds the compile, not only when the last measurement starts: the run's first
    measurement always starts, a later one only while the seconds spent plus the last one's fit the budget."""
    budget = selection._TRITON_MEASURE
    with selection.measurement_budgets(float("inf"), 3.0):
        assert selection._budget_spent(budget, "measure_budget_s") is None
        with selection._spending(budget):
            time.sleep(0.05)
        assert budget["last_s"] >= 0.05 and budget["spent_s"] == budget["last_s"]
        budget.update(spent_s=1.9, last_s=1.0)
        assert selection._budget_spent(budget, "measure_budget_s") is None
        budget.update(spent_s=2.1, last_s=1.1)
        reason = selection._budget_spent(budget, "measure_budget_s")
        assert "measure_budget_s=3" in reason and "would be overrun" in reason and "1.1 s" in reason, reason
    assert budget["last_s"] == 0.0 and selection._budget_spent(budget, "measure_budget_s") is None  # no run


def test_post_norm_measurement_counts_against_the_budget(measured):
    """The post-norm's measurement (tuning every whole-row config) spends the run's measure_budget_s like the
    regrouped GEMMs' close calls: once spent, the next post-norm site is not measured in that compile (unfused,
    pending) and a later compile measures it."""
    numbers, calls, config = measured
    numbers.update(fused_ms=1.0, mm_ms=1.0, copy_ms=0.5, plan=CONFIG)
    other = dataclasses.replace(CUDA_SITE, N=128)
    with selection.measurement_budgets(float("inf"), 0.5):
        assert selection.choose(CUDA_SITE, config).fused and len(calls) == 1
        selection._TRITON_MEASURE["spent_s"] = 0.6
        choice = selection.choose(other, config)
        assert not choice.fused and "measure_budget_s=0.5" in choice.reason and len(calls) == 1
    assert selection.pending_token(config)
    with selection.measurement_budgets(float("inf"), 0.5):  # the next compile
        assert selection.choose(other, config).fused and len(calls) == 2
    assert selection.pending_token(config) == ""
