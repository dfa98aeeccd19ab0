"""The per-site choice: policies, the measured rule (min_speedup, min_kernel_ms, CUDA graphs) and the disk cache.
The measurement itself needs a GPU (test_gpu.py); here it is replaced by recorded numbers."""

import dataclasses
import json

import pytest
import torch

from norm_fusion_inductor import selection, sites, timing
from norm_fusion_inductor.config import OLDER_FUSIONS, NormFusionConfig
from norm_fusion_inductor.kernels import row_norm

CUDA_SITE = selection.MatmulSite(M=262144, K=1024, N=256, dtype=torch.bfloat16, device=torch.device("cuda", 0),
                                 has_norm_weight=True, has_bias=False)
CPU_SITE = selection.MatmulSite(M=64, K=32, N=16, dtype=torch.float32, device=torch.device("cpu"),
                                has_norm_weight=True, has_bias=False)


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
    assert always.fused and always.implementation == "reference"
    assert selection.choose(CPU_SITE, NormFusionConfig(policy="never")).reason == "policy=never"


def test_measured_rule(measured):
    numbers, calls, config = measured
    # recorded at compile time on the H200 (262144x1024x256): fused 0.299, cuBLAS 0.243; a copy of x [262144,
    # 1024] on the SMs takes 0.252 (benchmarks/diagnostics/copy_timing.py). Fused it ran at 0.65x of torch.compile
    numbers.update(fused_ms=0.299, mm_ms=0.243, copy_ms=0.252)
    choice = selection.choose(CUDA_SITE, config)
    assert choice.fused and choice.implementation == "fused_triton" and "0.2990" in choice.reason
    # a margin below PROLOGUE_MIN_SPEEDUP: unfused (262144x1024x1024 beat its bound by 1.078x and ran 4 % slower
    # fused), even at the default min_speedup of 1.05 (the regrouped rewrite's margin)
    numbers.update(fused_ms=1.038, mm_ms=0.867, copy_ms=0.252)
    other = selection.MatmulSite(**{**CUDA_SITE.__dict__, "N": 1024})
    assert config.min_speedup < 1.078 < selection.PROLOGUE_MIN_SPEEDUP
    assert not selection.choose(other, config).fused
    # a post-norm with a residual: 1.5 copies of the output. LayerNorm 262144x512x1024, measured at compile time
    # (fused 0.876, cuBLAS 0.499), ran 11 % slower fused when the copy was timed on the copy engines (0.397)
    post = selection.MatmulSite(**{**CUDA_SITE.__dict__, "K": 512, "N": 1024, "norm": "ln", "position": "post",
                                   "has_residual": True})
    numbers.update(fused_ms=0.876, mm_ms=0.499, copy_ms=0.252)
    assert not selection.choose(post, config).fused


def test_training_prologue_site_is_declined_without_measuring(measured):
    """In training the backward reads the normalized tensor (dW = dYᵀ·n): the prologue rewrite moves its write
    into the backward instead of removing it, so the bound is cuBLAS alone, which the fused GEMM would have to
    beat by the margin: declined without tuning or timing anything. The Llama-3-8B layer's lm_head in its
    training step (H200, 2026-12-03): fused 0.0498, cuBLAS 0.0386, copy of x 0.0650 ms — taken against mm + copy,
    the step ran 0.972x default."""
    numbers, calls, config = measured
    numbers.update(fused_ms=0.0498, mm_ms=0.0386, copy_ms=0.0650)
    site = selection.MatmulSite(**{**CUDA_SITE.__dict__, "M": 16384, "K": 4096, "N": 128})
    training = selection.choose(dataclasses.replace(site, backward_reads_norm=True), config)
    assert not training.fused and "nothing to save in training" in training.reason and not calls
    assert selection.choose(site, config).fused and len(calls) == 1  # inference: measured


def test_copy_is_an_sm_kernel():
    """The bound's copy must not be Tensor.copy_ (a memcpy node on the copy engines when graph-captured)."""
    src, dst = torch.randn(64, 32), torch.empty(64, 32)
    assert torch.equal(timing.sm_copy(dst, src), -src)
    import inspect

    assert ".copy_(" not in inspect.getsource(selection)


def test_short_kernels_through_the_op_stay_unfused_unless_cudagraphs(measured):
    numbers, _, config = measured
    numbers.update(fused_ms=0.047, mm_ms=0.034, copy_ms=0.033)
    small = selection.MatmulSite(**{**CUDA_SITE.__dict__, "M": 65536, "K": 512})
    assert selection.choose(small, config).fused  # launched from Inductor's code: no host cost to fear
    op_config = NormFusionConfig(launch="op", cache_dir=config.cache_dir)
    choice = selection.choose(small, op_config)
    assert not choice.fused and "min_kernel_ms" in choice.reason
    with torch._inductor.config.patch({"triton.cudagraphs": True}):
        assert selection.choose(small, op_config).fused


def test_wide_post_norm_rows_stay_unfused_with_the_reason(measured):
    """The post-norm epilogue needs whole rows in a tile: BERT-base's attention-output post-norm (16384x768x768 +
    residual) has a static reason naming the width and the rewrite that takes it (nothing is timed); a 256-wide
    one is measured and, launched by Inductor, fused."""
    numbers, calls, config = measured
    reason = row_norm.post_norm_unsupported_reason(torch.bfloat16, 768, 768, 16384, torch.device("cuda", 0))
    assert "N=768 > 256" in reason and "regrouped_norm" in reason
    post = selection.MatmulSite(**{**CUDA_SITE.__dict__, "M": 16384, "K": 768, "N": 256, "position": "post",
                                   "norm": "ln", "has_residual": True})
    numbers.update(fused_ms=0.063, mm_ms=0.09, copy_ms=0.03, plan=["row", {"BLOCK_M": 128}])
    assert selection.choose(post, config).fused and calls


def test_gluon_plan_pays_its_host_launch_cost(measured, monkeypatch, tmp_path):
    """A Gluon plan is launched from Python each call: the decision counts GPU + host unless CUDA graphs
    replay the launches, and takes the best plan Inductor launches itself where that is faster. Numbers from the
    H200 LayerNorm sweep (2026-11-30): 65536x1024x256 measured 0.091 ms on the GPU, ran 0.32 ms per call."""
    numbers, calls, _ = measured
    gluon = ["gluon_in_loop", {"BLOCK_M": 128}]
    triton = ["in_loop", {"BLOCK_M": 128}]
    site = selection.MatmulSite(**{**CUDA_SITE.__dict__, "M": 65536, "norm": "ln"})

    def choose(site, **changes):  # measured afresh: no cached choice in memory or on disk
        numbers.update(changes)
        monkeypatch.setattr(selection, "_MEMORY", {})
        return selection.choose(site, NormFusionConfig(cache_dir=str(tmp_path / str(len(calls)))))

    # the Triton plan still beats the unfused bound: it is taken, with the reason
    choice = choose(site, fused_ms=0.091, mm_ms=0.063, copy_ms=0.065, plan=gluon, host_ms=0.25, direct_ms=0.098,
                    direct_plan=triton)
    assert choice.fused and choice.plan == tuple(triton) and "Triton mainloop" in choice.reason
    # neither beats the bound once the host cost counts: unfused
    choice = choose(site, direct_ms=0.13)
    assert not choice.fused and "0.2500 ms of host time" in choice.reason
    # under CUDA graphs the host cost is gone: the Gluon plan on its GPU time
    with torch._inductor.config.patch({"triton.cudagraphs": True}):
        choice = choose(site)
    assert choice.fused and choice.plan == tuple(gluon)
    # the host time adds to the GPU time (several op calls per step do not hide it): the Gluon plan where both
    # together beat the plan Inductor launches itself, not where its GPU time alone does
    choice = choose(CUDA_SITE, fused_ms=0.31, mm_ms=0.24, copy_ms=0.25, host_ms=0.12, direct_ms=0.34)
    assert choice.fused and choice.plan == tuple(triton) and "Triton mainloop" in choice.reason
    choice = choose(CUDA_SITE, fused_ms=0.26, host_ms=0.06, direct_ms=0.34)
    assert choice.fused and choice.plan == tuple(gluon) and "GPU 0.2600" in choice.reason


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


def test_plan_is_kept_with_the_choice(measured, monkeypatch):
    numbers, calls, config = measured
    plan = ["pre_pass", {"BLOCK_M": 128, "BLOCK_N": 256}]
    numbers.update(fused_ms=0.3, mm_ms=0.2, copy_ms=0.3, plan=plan)
    assert selection.choose(CUDA_SITE, config).plan == tuple(plan)
    monkeypatch.setattr(selection, "_MEMORY", {})  # a new process: the plan comes back from disk as a tuple
    assert selection.choose(CUDA_SITE, config).plan == tuple(plan) and len(calls) == 1
    # policy "always" measures nothing: it takes the measured site's plan, and tunes an unmeasured site's once
    tuned = []
    monkeypatch.setattr(selection, "_tune", lambda site: tuned.append(site) or {"plan": plan})
    always = NormFusionConfig(policy="always", cache_dir=config.cache_dir)
    assert selection.choose(CUDA_SITE, always).plan == tuple(plan) and tuned == []
    other = dataclasses.replace(CUDA_SITE, N=2048)
    assert selection.choose(other, always).plan == tuple(plan)
    assert selection.choose(other, always).plan == tuple(plan) and tuned == [other] and len(calls) == 1


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


# LayerNorm 65536x2048x1024 on the H200 (2026-11-30, BENCHMARKS.md): the eager entry 0.535 ms against a bound of
# 0.566 (cuBLAS 0.438 + copy 0.128), inside PROLOGUE_MIN_SPEEDUP; compiled, the fused graph ran 0.478 and the
# default 0.555
NEAR_MISS = selection.MatmulSite(M=65536, K=2048, N=1024, dtype=torch.bfloat16, device=torch.device("cuda", 0),
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
    monkeypatch.setattr(selection, "_tune", lambda site: {"plan": ["gluon_in_loop", {"BLOCK_M": 128}]})
    return numbers, child, NormFusionConfig(compiled_check=True, cache_dir=config.cache_dir)


@pytest.mark.parametrize("compiled_ms, fused", [(0.555, True), (0.52, False), (None, False)])
def test_near_miss_is_decided_by_the_compiled_graphs(compiled_child, compiled_ms, fused):
    """compiled_check: a fused kernel that beats the lower bound by less than min_speedup is compiled both ways in
    a child process; fused with the "always" plan if that wins by compiled_min_speedup (0.555 / 0.478 = 1.16),
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
        assert choice.plan == ("gluon_in_loop", {"BLOCK_M": 128}) and "0.4780 ms vs 0.5550" in choice.reason
    elif compiled_ms is None:
        assert "not measured" in choice.reason and "child process failed" in choice.reason


@pytest.mark.parametrize("host_ms, compiled_ms, fused, asked", [
    (0.05, 0.146, False, True),  # the compiled fused graph (0.478 ms) did not win
    (0.05, 0.60, True, True),
    (0.03, 0.146, True, False),  # host time well under the GPU's: no child
    (0.106, 0.60, False, False),  # 65536x512x1024 (RMS sweep, H200): GPU + host misses the bound, no child
])
def test_gluon_win_near_host_bound_asks_the_child(compiled_child, host_ms, compiled_ms, fused, asked):
    """A Gluon plan that beats the bound with its host time per call added, but whose host time is above
    HOST_BOUND_RISK of its GPU time, is confirmed by the compiled graphs (the child's fused graph: 0.478 ms)."""
    numbers, child, config = compiled_child
    numbers.update(fused_ms=0.08, mm_ms=0.122, copy_ms=0.0335, host_ms=host_ms,
                   plan=["gluon_in_loop", {"BLOCK_M": 128}])
    child["compiled_ms"] = compiled_ms
    site = dataclasses.replace(NEAR_MISS, norm="rms", has_norm_bias=False)
    choice = selection.choose(site, config)
    assert choice.fused == fused and len(child["calls"]) == int(asked), choice.reason
    assert ("host time is close" in choice.reason) == asked
    with torch._inductor.config.patch({"triton.cudagraphs": True}):  # launches replayed: no host cost, no child
        selection._MEMORY.clear()
        assert selection.choose(dataclasses.replace(site, M=65537), config).fused
    assert len(child["calls"]) == int(asked)


def test_slightly_slower_than_the_bound_asks_the_child(compiled_child):
    """A LayerNorm kernel a little slower than the bound (1.06x, within NEAR_MISS_LAYER_NORM) is decided by the
    compiled graphs: the eager LayerNorm entry's separate weight-preparation kernels make it read slow."""
    numbers, child, config = compiled_child
    numbers.update(fused_ms=0.60)
    assert selection.choose(NEAR_MISS, config).fused and len(child["calls"]) == 1


def test_measured_plan_is_the_one_policy_always_takes(measured):
    """The plan tuned for the measurement is stored as the site's plan, so that a compiled_check child (the plugin
    with policy "always", same cache) does not tune the site again."""
    numbers, _, config = measured
    numbers.update(fused_ms=0.3, mm_ms=0.2, copy_ms=0.3, plan=["in_loop", {"BLOCK_M": 128}])
    selection.choose(CUDA_SITE, config)
    selection._MEMORY.clear()  # as in a new process: from the disk cache

    def tune(site):
        raise AssertionError("tuned again")

    assert selection._cached(CUDA_SITE, config, "plan", tune)["plan"] == ("in_loop", {"BLOCK_M": 128})


def test_rms_site_above_the_bound_asks_no_child(compiled_child):
    """The window above the bound is for the LayerNorm entry's separate weight preparation; an RMSNorm site whose
    kernel is slower than the bound is unfused without a child (the Llama layer's sites, 1.04-1.15x: 188 s of
    child compiles on the H200, none fused)."""
    numbers, child, config = compiled_child
    numbers.update(fused_ms=0.60)
    rms = dataclasses.replace(NEAR_MISS, norm="rms", has_norm_bias=False)
    assert not selection.choose(rms, config).fused and child["calls"] == []
    numbers.update(fused_ms=0.55)  # faster than the bound, not by min_speedup: the child decides
    assert selection.choose(dataclasses.replace(rms, N=512), config).fused and len(child["calls"]) == 1


def test_clear_loss_or_win_asks_no_child(compiled_child):
    numbers, child, config = compiled_child
    numbers.update(fused_ms=0.75)  # 1.33x the bound (0.566), beyond NEAR_MISS_LAYER_NORM: unfused without a child
    assert not selection.choose(NEAR_MISS, config).fused
    numbers.update(fused_ms=0.40)  # beats the bound by min_speedup: fused without a child
    site = dataclasses.replace(NEAR_MISS, N=2048)  # another key: measured afresh
    assert selection.choose(site, config).fused and child["calls"] == []


@pytest.mark.parametrize("fields", [
    dict(position="pre", norm="rms", has_norm_weight=True, has_bias=False),
    dict(position="pre", norm="ln", has_norm_weight=True, has_norm_bias=True, has_bias=True, weight_kn=True),
    dict(position="post", norm="rms", has_norm_weight=True, has_bias=True, has_residual=True, write_z=True),
    dict(position="post", norm="ln", has_norm_weight=True, has_norm_bias=True, has_bias=True,
         has_residual_out=True),
], ids=["pre-rms", "pre-ln-conv1d", "post-rms-residual-z", "post-ln-residual-out"])
def test_child_subgraph_is_the_one_the_plugin_fuses(fields):
    """measure_block.matmul_block, the graph the child compiles both ways, is matched by the plugin at the site's
    shape and kind (on the CPU its rewrite is the reference op), and computes what the site computes."""
    import norm_fusion_inductor as nfi
    from norm_fusion_inductor import measure_block

    torch._dynamo.reset()
    site = selection.MatmulSite(M=64, K=32, N=16, dtype=torch.float32, device=torch.device("cpu"), **fields)
    t = sites.matmul_operands(site)
    args = tuple(t.get(k) for k in ("x", "w", "g", "beta", "b", "residual", "residual_out"))
    block = measure_block.matmul_block(site)
    eager = block(*args)
    nfi.clear_reports()
    options = {"norm_fusion": {"policy": "always", "fusions": OLDER_FUSIONS}}  # as the child compiles it
    out = torch.compile(block, backend="norm_fusion", options=options)(*args)
    rewritten = [r for r in nfi.reports() if r.rewritten]
    assert len(rewritten) == 1 and rewritten[0].shape == (64, 32, 16), [r.line() for r in nfi.reports()]
    expected = "matmul_norm" if site.position == "post" else f"{'layer' if site.norm == 'ln' else 'rms'}_norm_matmul"
    assert rewritten[0].fusion == expected
    for got, want in zip(*((o,) if torch.is_tensor(o) else o for o in (out, eager))):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert measure_block.matmul_site(dict(dataclasses.asdict(site), dtype=str(site.dtype),
                                          device=str(site.device), kind="matmul")) == site


def test_entries_another_process_stored_meanwhile_are_kept(measured, monkeypatch):
    """A measurement that runs a child process (_compiled_check) lets the child store its tuned plan in the same
    cache file; storing the parent's result must keep it, so that the parent does not tune the plan again."""
    numbers, calls, config = measured
    numbers.update(fused_ms=0.3, mm_ms=0.2, copy_ms=0.3)
    path = selection._cache_file(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"before": {"fused_ms": 1.0}}))

    def measure_with_child(site):
        path.write_text(json.dumps({**json.loads(path.read_text()), "child|plan": {"plan": ["in_loop", {}]}}))
        return dict(numbers)

    monkeypatch.setattr(selection, "_measure", measure_with_child)
    selection.choose(CUDA_SITE, config)
    saved = json.loads(path.read_text())
    assert set(saved) == {"before", "child|plan", "262144x1024x256"}
    assert selection._MEMORY["child|plan"] == {"plan": ["in_loop", {}]}


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
