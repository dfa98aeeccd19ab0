"""The Quack (CuTe-DSL) backend of the epilogue GEMM: the op's dispatch and fallbacks (Quack absent, or failing
at JIT time: the Triton kernel runs, the reason logged), the per-GEMM choice between backends, and, where Quack
is installed on an sm_90+ GPU, every epilogue it takes against float64 and a model trained through it."""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest
import torch
import torch.nn as nn

import norm_fusion_inductor as nfi
from norm_fusion_inductor import regrouped, selection
from norm_fusion_inductor.config import NormFusionConfig
from norm_fusion_inductor.kernels import epilogue_gemm as eg
from norm_fusion_inductor.kernels import quack_epilogue_gemm as qg
from tests import fuzz_regrouped

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
QUACK = CUDA and qg.missing_reason() is None and torch.cuda.get_device_capability()[0] in (9, 10)


def rel(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _operands(M, K, N, dtype, epilogue, device=DEVICE):
    a = torch.randn(M, K, device=device, dtype=dtype)
    w = torch.randn(N, K, device=device, dtype=dtype) / K ** 0.5
    return a, w, dict(
        bias=torch.randn(N, device=device) if epilogue.bias else None,
        residual=torch.randn(M, N, device=device, dtype=dtype) if epilogue.residual else None,
        scale=torch.rand(M, device=device) + 0.5 if epilogue.row_norm != "none" else None,
        shift=torch.randn(M, device=device) if epilogue.row_norm == "ln" else None,
        u=torch.randn(N, device=device) if epilogue.row_norm == "ln" else None)


def _op(a, w, t, e, backend):
    return regrouped.epilogue_gemm(a, w, t["bias"], t["residual"], t["scale"], t["shift"], t["u"], e.row_norm,
                                   e.activation, e.write_aux, e.stats, False, backend=backend)


def test_quack_absent_runs_the_triton_kernel_and_says_why(caplog, monkeypatch):
    monkeypatch.setattr(qg, "missing_reason", lambda: "quack-kernels is not importable (test)")
    regrouped._warn_once.cache_clear()
    e = eg.Epilogue(row_norm="rms", activation="silu", write_aux=True)
    dtype = torch.bfloat16 if CUDA else torch.float32
    a, w, t = _operands(64, 32, 48, dtype, e)
    with caplog.at_level(logging.WARNING, logger="norm_fusion_inductor"):
        via_quack = _op(a, w, t, e, "quack")
    assert "Quack backend is not used" in caplog.text and "not importable (test)" in caplog.text
    via_triton = _op(a, w, t, e, "triton")
    for x, y in zip(via_quack, via_triton):
        assert torch.equal(x, y)
    with pytest.raises(ValueError, match="backend must be"):
        _op(a, w, t, e, "cutlass")


def test_quack_failing_at_jit_time_falls_back_once(caplog, monkeypatch):
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("DSL compile error (test)")

    monkeypatch.setattr(qg, "unsupported_reason", lambda *args: None)
    monkeypatch.setattr(qg, "epilogue_gemm", failing)
    monkeypatch.setattr(regrouped, "QUACK_FAILED", {})
    regrouped._warn_once.cache_clear()
    e = eg.Epilogue(residual=True, stats="rms")
    dtype = torch.bfloat16 if CUDA else torch.float32
    a, w, t = _operands(40, 32, 64, dtype, e)
    with caplog.at_level(logging.WARNING, logger="norm_fusion_inductor"):
        first = _op(a, w, t, e, "quack")
        second = _op(a, w, t, e, "quack")
    assert len(calls) == 1, "a GEMM Quack failed on is not tried again"
    assert "DSL compile error (test)" in caplog.text
    assert list(regrouped.QUACK_FAILED.values())[0].startswith("Quack failed at (40, 32)")
    triton = _op(a, w, t, e, "triton")
    for x, y, z in zip(first, second, triton):
        assert torch.equal(x, y) and torch.equal(x, z)


def test_unsupported_epilogues_name_the_piece(monkeypatch):
    monkeypatch.setattr(qg, "missing_reason", lambda: None)
    a = torch.empty(64, 64, dtype=torch.bfloat16)
    w = torch.empty(128, 64, dtype=torch.bfloat16)
    assert "sm_90" in qg.unsupported_reason(a, w, False, eg.Epilogue())  # a CPU tensor
    if not CUDA:
        return
    a, w = a.cuda(), w.cuda()
    assert "centred" in qg.unsupported_reason(a, w, False, eg.Epilogue(residual=True, stats="ln"))
    assert "normalized on load" in qg.unsupported_reason(a, w, False, eg.Epilogue(residual=True,
                                                                                  residual_norm="rms"))
    assert "gelu_mul" in qg.unsupported_reason(a, w, False, eg.Epilogue(row_norm="rms", activation="gelu_mul"))
    assert "fp16/bf16" in qg.unsupported_reason(a.float(), w.float(), False, eg.Epilogue())


def _fake_gpu(monkeypatch, numbers):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))
    monkeypatch.setattr(selection, "_cached_epilogue", lambda site, config, direct=False: dict(numbers))


def _choose(config, **kw):
    args = dict(row_norm="rms", activation="silu_mul", write_aux=False, stats="none", residual=False, w_kn=False,
                norm_bytes=16384 * 4096 * 2, config=config)
    args.update(kw)
    return selection.choose_epilogue_gemm(16384, 28672, 4096, torch.bfloat16, torch.device("cuda", 0), **args)


@pytest.mark.parametrize("backward_reads", [False, True])
def test_saved_bytes_leave_out_a_normalized_tensor_the_backward_reads(monkeypatch, tmp_path, backward_reads):
    """A consumer's bound counts the normalized tensor's write (its share) only where no backward reads it."""
    sites = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))
    monkeypatch.setattr(selection, "_cached_epilogue", lambda site, config, direct=False: sites.append(site) or dict(
        triton_ms=1.0, mm_ms=1.0, saved_ms=0.1, quack_reason="test"))
    choice = _choose(NormFusionConfig(cache_dir=str(tmp_path)), activation="none",
                     backward_reads_norm=backward_reads)
    assert sites[0].saved_bytes == (0 if backward_reads else 16384 * 4096 * 2)
    assert ("the backward reads it" in choice.reason) is backward_reads
    _choose(NormFusionConfig(cache_dir=str(tmp_path)), row_norm="none", activation="none", stats="rms",
            residual=True, residual_norm="rms", norm_bytes=0, backward_reads_norm=backward_reads)
    out_bytes = 16384 * 28672 * 2  # the producer: z's trip, and the normalized residual's write (its read becomes
    assert sites[1].saved_bytes == 2 * out_bytes + (0 if backward_reads else out_bytes)  # one of x) unless the
    # backward reads it


def test_a_per_call_fold_costs_at_least_its_kernel(monkeypatch, tmp_path):
    """A tiny weight's fold priced by its bytes alone is ~0 ms; its kernel is not: a near call at a 40 us pair
    (GEMM 0.0281 ms vs bound 0.0300 ms passes 1.05x without the fold) is declined once the kernel's floor counts."""
    _fake_gpu(monkeypatch, dict(triton_ms=0.0281, mm_ms=0.0231, saved_ms=0.0069, quack_reason="test",
                                triton_config=dict(BLOCK_M=128)))
    config = NormFusionConfig(cache_dir=str(tmp_path), min_direct_saving_ms=0)  # the fold's price alone
    kw = dict(activation="none", norm_bytes=65536 * 256 * 2, direct_launch=True)
    assert _choose(config, **kw).fused
    choice = _choose(config, fold_bytes=256 * 256 * 2, **kw)
    assert not choice.fused and f"{selection.FOLD_KERNEL_MIN_MS:.4f} ms" in choice.reason, choice.reason


def test_a_direct_launch_must_save_min_direct_saving_ms(monkeypatch, tmp_path):
    """A directly launched GEMM adds launches (host time) to the step: GPT-2-medium's fc GEMM (0.1227 ms against a
    0.1324 ms bound, 1.08x) ran its host-bound layer at 0.78x. A site saving under min_direct_saving_ms stays
    unfused, the reason names it; one saving more, or any under CUDA graphs, is taken; clear wins the cost model
    takes untimed likewise."""
    cfg = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=3, num_warps=8)
    numbers = dict(triton_ms=0.1227, mm_ms=0.1188, saved_ms=0.0136, quack_reason="test", triton_config=cfg)
    _fake_gpu(monkeypatch, numbers)
    config = NormFusionConfig(cache_dir=str(tmp_path), gemm_backends=("triton",))
    choice = _choose(config, direct_launch=True)
    assert not choice.fused and "saves 0.0097 ms per call, under min_direct_saving_ms=0.04" in choice.reason, \
        choice.reason
    assert _choose(NormFusionConfig(cache_dir=str(tmp_path), gemm_backends=("triton",), min_direct_saving_ms=0.005),
                   direct_launch=True).fused
    with torch._inductor.config.patch({"triton.cudagraphs": True}):
        assert _choose(config, direct_launch=True).fused
    _fake_gpu(monkeypatch, dict(numbers, triton_ms=0.3102, mm_ms=0.2900, saved_ms=0.0837))  # the LN tower's consumer
    assert _choose(config, direct_launch=True).fused
    # clear wins decided by the model: the same floor on the predicted saving
    for predicted, fused in ((0.1150, False), (0.0700, True)):
        _fake_gpu(monkeypatch, dict(mm_ms=0.1188, saved_ms=0.0136, decided_by_model=True, triton_config=cfg,
                                    predicted={"triton": predicted}))
        assert _choose(config, direct_launch=True).fused is fused, predicted


def test_choice_between_backends(monkeypatch, tmp_path):
    numbers = dict(triton_ms=2.80, quack_ms=2.30, mm_ms=2.55, saved_ms=0.35, quack_reason=None,
                   triton_host_ms=0.05, quack_host_ms=0.12)
    _fake_gpu(monkeypatch, numbers)
    config = NormFusionConfig(cache_dir=str(tmp_path))
    choice = _choose(config)
    assert choice.fused and choice.implementation == "regrouped_quack"
    assert "on quack 2.3000 ms" in choice.reason and "triton 2.8000 ms" in choice.reason
    assert "host time per op call: triton 0.0500, quack 0.1200 ms" in choice.reason
    # only the Triton backend allowed: it does not pass the default margin (2.80 * 1.05 > 2.90)
    only_triton = NormFusionConfig(cache_dir=str(tmp_path), gemm_backends=("triton",))
    choice = _choose(only_triton)
    assert not choice.fused and "on triton" in choice.reason and "needs 1.05x" in choice.reason
    # Quack not installed: the reason is in the log line, Triton is judged alone
    numbers.update(quack_ms=None, quack_reason="quack-kernels is not importable", triton_ms=2.0)
    _fake_gpu(monkeypatch, numbers)
    choice = _choose(config)
    assert choice.fused and choice.implementation == "regrouped_triton"
    assert "quack not offered (quack-kernels is not importable)" in choice.reason
    assert _choose(NormFusionConfig(policy="always", gemm_backends=("quack",))).implementation == "regrouped_quack"


def test_op_calls_are_priced_with_their_host_time(monkeypatch, tmp_path):
    """Without CUDA graphs a GEMM run as an op costs its GPU time plus its host time per call (the recsys towers
    ran host-bound with two Quack consumers that were faster on the GPU): the Triton kernel Inductor launches
    itself wins over a Quack op that is faster only on the GPU, and an op whose saving is under its host time
    stays unfused; under CUDA graphs the host time is not charged."""
    cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_stages=4, num_warps=8)
    # the RMS tower's consumer (H200): Quack 0.410 ms on the GPU, 0.291 ms host; Triton 0.422; bound 0.572
    numbers = dict(triton_ms=0.422, quack_ms=0.410, mm_ms=0.280, saved_ms=0.292, quack_reason=None,
                   triton_host_ms=0.378, quack_host_ms=0.291, triton_config=cfg)
    _fake_gpu(monkeypatch, numbers)
    config = NormFusionConfig(cache_dir=str(tmp_path))
    choice = _choose(config, direct_launch=True)
    assert choice.implementation == "regrouped_triton" and choice.plan == cfg, choice.reason
    # the same through the op (no direct launch): both pay their host time, and neither passes the margin
    choice = _choose(config)
    assert not choice.fused and "priced with its op call's host time" in choice.reason, choice.reason
    with torch._inductor.config.patch({"triton.cudagraphs": True}):
        assert _choose(config, direct_launch=True).implementation == "regrouped_quack"
    # a long GEMM whose saving dwarfs the host time stays on Quack
    _fake_gpu(monkeypatch, dict(numbers, triton_ms=5.92, quack_ms=5.54, mm_ms=5.57, saved_ms=0.49,
                                quack_host_ms=0.12))
    assert _choose(config, direct_launch=True).implementation == "regrouped_quack"


def test_short_gemms_stay_unfused_unless_cuda_graphs(monkeypatch, tmp_path):
    """The op is a Python call per GEMM: a kernel shorter than min_kernel_ms would leave the GPU waiting on the
    host, which the CUDA-graph timing does not show."""
    _fake_gpu(monkeypatch, dict(triton_ms=0.05, quack_ms=0.04, mm_ms=0.06, saved_ms=0.03, quack_reason=None))
    config = NormFusionConfig(cache_dir=str(tmp_path))
    choice = _choose(config)
    assert not choice.fused and "min_kernel_ms=0.15" in choice.reason and "on quack 0.0400" in choice.reason
    with torch._inductor.config.patch({"triton.cudagraphs": True}):
        assert _choose(config).implementation == "regrouped_quack"
    assert _choose(NormFusionConfig(cache_dir=str(tmp_path), min_kernel_ms=0.01)).fused


def test_short_gemm_is_launched_directly_on_triton(monkeypatch, tmp_path):
    """Where the pass can trace the launch into the graph (``direct_launch``), the Triton kernel has no op call
    per step: a GEMM too short for the op is taken on Triton, with its tuned block config as the plan, even when
    Quack's op would be faster on the GPU; without the config (an older cache entry) it stays unfused."""
    cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_stages=4, num_warps=8)
    numbers = dict(triton_ms=0.045, quack_ms=0.04, mm_ms=0.06, saved_ms=0.03, quack_reason=None, triton_config=cfg)
    _fake_gpu(monkeypatch, numbers)
    config = NormFusionConfig(cache_dir=str(tmp_path))
    choice = _choose(config, direct_launch=True)
    assert choice.implementation == "regrouped_triton" and choice.plan == cfg
    assert "launched directly (not quack: shorter than min_kernel_ms through the op)" in choice.reason
    assert not _choose(config).fused  # the op: host-bound
    # long enough for the op: the faster backend, through the op
    _fake_gpu(monkeypatch, dict(numbers, triton_ms=2.7, quack_ms=2.3, mm_ms=2.55, saved_ms=0.35))
    choice = _choose(config, direct_launch=True)
    assert choice.implementation == "regrouped_quack" and choice.plan is None
    # Triton itself misses the margin (0.087 * 1.05 > 0.09): nothing to launch directly
    _fake_gpu(monkeypatch, dict(numbers, triton_ms=0.087))
    assert not _choose(config, direct_launch=True).fused
    _fake_gpu(monkeypatch, dict(numbers, triton_config=None))
    assert not _choose(config, direct_launch=True).fused


@pytest.mark.parametrize("op_floor_ms, compiled", [(0.1575, False), (0.0, True)])
def test_quack_is_not_compiled_where_an_op_cannot_win(monkeypatch, op_floor_ms, compiled):
    """The measurement compiles Quack (seconds of JIT per GEMM) only where its op could be chosen: a bound
    (cuBLAS + saved bytes, here 0.05 + 0.05 ms) under min_kernel_ms × min_speedup cannot be beaten by an op
    call that must itself run min_kernel_ms. Timings faked; the GEMMs run on the CPU."""
    monkeypatch.setattr(selection, "graph_ms", lambda fn: (fn(), 0.05)[1])
    monkeypatch.setattr(selection, "host_ms", lambda fn: 0.0)
    monkeypatch.setattr(selection, "_quack_reason", lambda site, a, w: None)
    monkeypatch.setattr(qg, "missing_reason", lambda: None)  # Quack "installed"
    site = selection.EpilogueSite(64, 32, 32, torch.float32, torch.device("cpu"), "rms", "none", False, "none",
                                  False, False, 4096)
    times = selection._measure_epilogue(site, selection.Screen(op_floor_ms=op_floor_ms))
    assert ("quack_ms" in times) is compiled
    assert compiled or times["quack_reason"].startswith("not compiled: an op call cannot win"), times


def _fake_timings(monkeypatch, gpu_ms: dict, host: float, predicted: dict):
    """graph_ms answers cuBLAS, the copy, Triton and Quack in the order the measurement times them; the GEMMs run
    on the CPU; the cost model's predictions are ``predicted``."""
    order = iter(["mm", "saved", "triton", "quack"])
    monkeypatch.setattr(selection, "graph_ms", lambda fn: (fn(), gpu_ms[next(order)])[1])
    monkeypatch.setattr(selection, "host_ms", lambda fn: host)
    monkeypatch.setattr(selection, "_quack_reason", lambda site, a, w: None)
    monkeypatch.setattr(qg, "missing_reason", lambda: None)  # Quack "installed"
    monkeypatch.setattr(selection, "_predicted", lambda site, cache_root=None: dict(predicted))


SCREEN_SITE = selection.EpilogueSite(64, 32, 32, torch.float32, torch.device("cpu"), "rms", "none", False, "none",
                                     False, False, 4096)


@pytest.mark.parametrize("predicted_triton, compiled", [(0.9, True), (1.3, False)])
def test_cost_model_screens_a_clear_loss(monkeypatch, predicted_triton, compiled):
    """A backend the cost model predicts to miss the measured bound (cuBLAS 0.6 + copy 0.4 ms) by min_speedup
    even after dividing by model_margin (1.3 / 1.2 · 1.05 = 1.14 > 1.0) is neither compiled nor timed, and says
    why; one near the margin (0.9) is timed. Timings faked."""
    _fake_timings(monkeypatch, dict(mm=0.6, saved=0.4, triton=0.95, quack=0.9), 0.0,
                  dict(triton=predicted_triton, quack=0.9))
    times = selection._measure_epilogue(SCREEN_SITE, selection.Screen(margin=1.2, host_priced=False))
    assert ("triton_ms" in times) is compiled, times
    assert compiled or times["triton_reason"].startswith("not compiled: the cost model predicts 1.3000 ms"), times
    assert times["predicted"] == dict(triton=predicted_triton, quack=0.9)
    off = selection._measure_epilogue.__defaults__[0]  # the default screen: margin 0, nothing screened
    _fake_timings(monkeypatch, dict(mm=0.6, saved=0.4, triton=0.95, quack=0.9), 0.0, dict(triton=9.0, quack=9.0))
    times = selection._measure_epilogue(SCREEN_SITE, off)
    assert "triton_ms" in times and "quack_ms" in times and "predicted" not in times


@pytest.mark.parametrize("host_priced, compiled", [(False, True), (True, False)])
def test_quack_screen_counts_its_op_calls_host_time(monkeypatch, host_priced, compiled):
    """Without CUDA graphs an op call's host time is part of its price: Quack's is taken as
    QUACK_HOST_PER_TRITON_HOST of Triton's measured one (1.0 ms here) before it is compiled. Predicted 0.9 ms
    (0.75 at best) it would beat Triton's 0.8 ms on the GPU alone, but 0.75 + 0.7 misses the bound 1.5 ms by
    min_speedup. Timings faked."""
    _fake_timings(monkeypatch, dict(mm=1.0, saved=0.5, triton=0.8, quack=0.7), 1.0, dict(triton=0.8, quack=0.9))
    times = selection._measure_epilogue(SCREEN_SITE, selection.Screen(margin=1.2, host_priced=host_priced))
    assert ("quack_ms" in times) is compiled, times
    assert compiled or "host 0.7000" in times["quack_reason"] and "misses the unfused bound" in times["quack_reason"]


@pytest.mark.parametrize("direct_launch, compiled", [(False, True), (True, False)])
def test_quack_screen_knows_when_triton_is_launched_directly(monkeypatch, direct_launch, compiled):
    """Without CUDA graphs, a Triton kernel Inductor launches itself pays no host time: Quack (0.9 ms predicted,
    0.75 at best, + 0.7 · 0.3 host) is compiled against Triton through its op (0.8 + 0.3 ms), not against Triton
    launched directly (0.8 ms). Timings faked."""
    _fake_timings(monkeypatch, dict(mm=1.5, saved=0.5, triton=0.8, quack=0.7), 0.3, dict(triton=0.8, quack=0.9))
    monkeypatch.setattr(eg, "tuned_for", lambda *args: {"BLOCK_M": 128})
    times = selection._measure_epilogue(SCREEN_SITE, selection.Screen(margin=1.2, direct_launch=direct_launch))
    assert ("quack_ms" in times) is compiled, times


def test_quack_screened_where_triton_is_measured_cheaper(monkeypatch):
    """Quack is not compiled where even its best predicted price does not beat Triton's measured one (under CUDA
    graphs: GPU times alone): predicted 1.08 ms, 0.9 at best, against Triton's 0.8."""
    _fake_timings(monkeypatch, dict(mm=1.0, saved=0.5, triton=0.8, quack=0.7), 0.0, dict(triton=0.8, quack=1.08))
    checked = []  # its structural check imports Quack (seconds): not done for a backend the screen rules out
    monkeypatch.setattr(selection, "_quack_reason", lambda site, a, w: checked.append(site))
    times = selection._measure_epilogue(SCREEN_SITE, selection.Screen(margin=1.2, host_priced=False))
    assert "triton_ms" in times and "quack_ms" not in times and not checked
    assert times["quack_reason"].endswith("not under the other backend's measured 0.8000 ms"), times


DEFAULT_TILE_CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=3, num_warps=8, FLATTEN=True,
                           WARP_SPECIALIZE=False, CTAS_PER_SM=1)


@pytest.mark.parametrize("predicted_triton, screen, quack_installed, decided", [
    (0.7, dict(), False, True),  # 0.7 * 1.2 * 1.05 = 0.88 < 1.0: a clear win
    (0.8, dict(), False, False),  # 0.8 * 1.2 * 1.05 = 1.008: close, measured
    (0.7, dict(direct_launch=False), False, False),  # through the op: its host time must be measured
    (0.7, dict(), True, False),  # Quack installed and predicted 0.6 / 1.2 < 0.7: it could win, so both are timed
    (0.7, dict(backends=("triton",)), True, True),  # ... unless Quack is not asked for
])
def test_cost_model_decides_a_clear_win_without_compiling(monkeypatch, tmp_path, predicted_triton, screen,
                                                          quack_installed, decided):
    """Where the pass launches the Triton kernel directly, a GEMM the cost model predicts to beat the measured
    bound (cuBLAS 0.6 + copy 0.4 ms) by min_speedup with model_win_margin to spare is taken with the kernel's
    default config, neither compiled nor timed; a close call, an op call or a Quack rival is measured. Timings
    faked (graph_ms answers cuBLAS, the copy, then the kernels); the GEMMs run on the CPU."""
    _fake_timings(monkeypatch, dict(mm=0.6, saved=0.4, triton=0.75, quack=0.7), 0.0,
                  dict(triton=predicted_triton, quack=0.6))
    monkeypatch.setattr(eg, "default_config", lambda a, epilogue, N: dict(DEFAULT_TILE_CONFIG))
    if not quack_installed:
        monkeypatch.setattr(qg, "missing_reason", lambda: "quack-kernels is not importable")
    full = dict(margin=1.2, win_margin=1.2, host_priced=False, direct_launch=True)
    times = selection._measure_epilogue(SCREEN_SITE, selection.Screen(**dict(full, **screen)))
    assert bool(times.get("decided_by_model")) is decided, times
    assert ("triton_ms" in times) is not decided and ("quack_ms" in times) is (not decided and quack_installed)
    if decided:
        assert times["triton_config"] == DEFAULT_TILE_CONFIG and times["predicted"]["triton"] == predicted_triton
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))
        monkeypatch.setattr(selection, "_cached_epilogue", lambda site, config, direct=False: dict(times))
        choice = _choose(NormFusionConfig(cache_dir=str(tmp_path)), direct_launch=True)
        assert choice.implementation == "regrouped_triton" and choice.plan == DEFAULT_TILE_CONFIG
        assert f"predicted {predicted_triton:.4f} ms by the cost model" in choice.reason
        assert "decided without compiling it" in choice.reason and "128x256x64" in choice.reason


def test_a_rope_gemm_is_never_a_clear_win(monkeypatch):
    """RoPE's default tile was chosen by its fit, not timed: a q/k projection with RoPE that the model predicts
    to win clearly (0.5 ms against a 1.0 ms bound) is still compiled and timed."""
    screen = selection.Screen(margin=1.2, win_margin=1.2, host_priced=False, direct_launch=True)
    for rope in (False, True):  # the same site without RoPE is a clear win
        _fake_timings(monkeypatch, dict(mm=0.6, saved=0.4, triton=0.75, quack=0.7), 0.0, dict(triton=0.5))
        monkeypatch.setattr(eg, "default_config", lambda a, epilogue, N: dict(DEFAULT_TILE_CONFIG))
        monkeypatch.setattr(qg, "missing_reason", lambda: "quack-kernels is not importable")
        site = dataclasses.replace(SCREEN_SITE, head_dim=16, rope=rope)
        times = selection._measure_epilogue(site, screen)
        assert bool(times.get("decided_by_model")) is not rope and ("triton_ms" in times) is rope, times


def test_weight_fold_counts_in_a_clear_win(monkeypatch):
    """The per-call weight fold is part of the fused price the model judges: 0.7 ms predicted plus a fold priced
    at the copy's rate (0.4 ms for 4096 bytes: 0.1 ms for 1024) is no longer a clear win."""
    _fake_timings(monkeypatch, dict(mm=0.6, saved=0.4, triton=0.75, quack=0.7), 0.0, dict(triton=0.7))
    monkeypatch.setattr(eg, "default_config", lambda a, epilogue, N: dict(DEFAULT_TILE_CONFIG))
    monkeypatch.setattr(qg, "missing_reason", lambda: "quack-kernels is not importable")
    site = dataclasses.replace(SCREEN_SITE, fold_bytes=1024)
    times = selection._measure_epilogue(site, selection.Screen(margin=1.2, win_margin=1.2, host_priced=False,
                                                                  direct_launch=True))
    assert not times.get("decided_by_model") and "triton_ms" in times, times


def test_default_config_applies_to_large_16_bit_grids():
    """The untuned config (``epilogue_gemm.default_config``): 128x256x64, 3 stages, 8 warps, the flattened loop
    except for the statistics epilogues and RoPE; none for small grids (under DEFAULT_TILE_MIN_WAVES waves of 132
    SMs), fp32, the post-norm's whole rows, the norm's backward and a residual normalized on load."""

    class CudaOperand:  # what default_config reads of a: no GPU here
        is_cuda, device = True, torch.device("cuda", 0)

        def __init__(self, M, K, dtype=torch.bfloat16):
            self.shape, self.dtype = (M, K), dtype

        def element_size(self):
            return torch.empty((), dtype=self.dtype).element_size()

    original = eg._num_sms
    eg._num_sms = lambda index: 132
    try:
        big = CudaOperand(65536, 1024)
        cfg = eg.default_config(big, eg.Epilogue(row_norm="rms", activation="silu"), 1024)
        assert {k: cfg[k] for k in eg.DEFAULT_TILE} == eg.DEFAULT_TILE and cfg["FLATTEN"]
        stats = eg.default_config(big, eg.Epilogue(residual=True, stats="rms"), 1024)
        assert stats["BLOCK_N"] == 256 and not stats["FLATTEN"]
        # 64 x 4 = 256 tiles >= 1.9 x 132 = 250.8; 32 x 8 = 256 too; 62 x 4 = 248 < 250.8
        assert eg.default_config(CudaOperand(8192, 1024), eg.Epilogue(row_norm="rms"), 1024) is not None
        assert eg.default_config(CudaOperand(4096, 2048), eg.Epilogue(row_norm="rms"), 2048) is not None
        assert eg.default_config(CudaOperand(62 * 128, 1024), eg.Epilogue(row_norm="rms"), 1024) is None
        assert eg.default_config(CudaOperand(65536, 1024, torch.float32), eg.Epilogue(row_norm="rms"), 1024) is None
        assert eg.default_config(big, eg.Epilogue(post_norm="rms"), 256) is None
        for head_dim in (128, 256):
            norm = eg.default_config(big, eg.Epilogue(head_dim=head_dim), 2048)
            assert {k: norm[k] for k in eg.DEFAULT_TILE} == eg.DEFAULT_TILE and norm["FLATTEN"]
            rope = eg.default_config(big, eg.Epilogue(head_dim=head_dim, rope=True), 2048)  # the plain loop
            assert {k: rope[k] for k in eg.DEFAULT_TILE} == eg.DEFAULT_TILE and not rope["FLATTEN"]
        assert eg.default_config(big, eg.Epilogue(residual=True, stats="rms", residual_norm="rms"), 1024) is None
    finally:
        eg._num_sms = original


def test_tuner_runs_the_default_config_untimed(monkeypatch):
    """Where ``default_config`` applies the tuner times nothing: that config, launched once, is the tuned one; a
    default that fails there (shared memory) is left out and the others are tuned."""
    other = dict(DEFAULT_TILE_CONFIG, BLOCK_N=128)
    monkeypatch.setattr(eg, "_TUNED", {})
    monkeypatch.setattr(eg, "default_config", lambda a, epilogue, N: dict(DEFAULT_TILE_CONFIG))
    monkeypatch.setattr(eg, "_configs", lambda a, epilogue, N=0: [dict(DEFAULT_TILE_CONFIG), other])
    monkeypatch.setattr(eg, "fastest_config", lambda *args, **kw: pytest.fail("timed"))
    a, w = torch.empty(64, 32), torch.empty(32, 32)
    launched = []
    assert eg.tuned_config(a, w, False, eg.Epilogue(), launched.append) == DEFAULT_TILE_CONFIG
    assert launched == [DEFAULT_TILE_CONFIG]
    assert eg.tuned_for(64, 32, 32, torch.float32, False, eg.Epilogue()) == DEFAULT_TILE_CONFIG

    def out_of_shared_memory(cfg):
        raise RuntimeError("out of resource: shared memory")

    offered = []
    monkeypatch.setattr(eg, "fastest_config", lambda configs, *args, **kw: offered.extend(configs) or configs[0])
    assert eg.tuned_config(a, w, False, eg.Epilogue(row_norm="rms"), out_of_shared_memory) == other
    assert offered == [other]


@pytest.mark.parametrize("probe_ms, tuned", [(0.95, False), (0.75, True)])
def test_quack_probe_config_first(monkeypatch, probe_ms, tuned):
    """With the screen on, Quack compiles one config first (PROBE_CONFIG); the shortlist is tuned only where the
    probe, PROBE_SLACK better, could still win: 0.95 / 1.05 = 0.905 ms does not beat Triton's 0.85 (no host under
    CUDA graphs), 0.75 does. Timings faked; Quack's configs are bookkeeping here (the GEMMs run on the CPU)."""
    _fake_timings(monkeypatch, dict(mm=1.5, saved=0.5, triton=0.85, quack=probe_ms), 0.0,
                  dict(triton=0.85, quack=0.8))
    monkeypatch.setattr(qg, "_TUNED", {})
    monkeypatch.setattr(qg, "probe_config", lambda device, epilogue: dict(qg.PROBE_CONFIG))
    forgotten = []
    monkeypatch.setattr(qg, "forget", lambda *shape: forgotten.append(shape))
    order = iter(["mm", "saved", "triton", "quack", "quack"])
    gpu = dict(mm=1.5, saved=0.5, triton=0.85, quack=probe_ms)
    monkeypatch.setattr(selection, "graph_ms", lambda fn: (fn(), gpu[next(order)])[1])
    times = selection._measure_epilogue(SCREEN_SITE, selection.Screen(margin=1.2, host_priced=False))
    assert times["quack_ms"] == probe_ms and bool(forgotten) is tuned
    assert times.get("quack_probe_only", False) is not tuned, times


def test_backends_not_asked_for_are_not_compiled(monkeypatch):
    """gemm_backends=("triton",) measures Triton alone (Quack's JIT was paid before even where it was off)."""
    _fake_timings(monkeypatch, dict(mm=1.0, saved=0.5, triton=0.8, quack=0.7), 0.0, {})
    times = selection._measure_epilogue(SCREEN_SITE, selection.Screen(backends=("triton",)))
    assert "triton_ms" in times and "quack_ms" not in times and "gemm_backends" in times["quack_reason"]


def test_model_margin_options_are_checked():
    """Both margins: 0 or >= 1; with model_margin 0 the cost model decides nothing (no clear win either)."""
    for name in ("model_margin", "model_win_margin"):
        with pytest.raises(ValueError, match=name):
            NormFusionConfig(**{name: 0.5})
        with pytest.raises(TypeError, match=name):
            NormFusionConfig(**{name: "1.2"})
    assert NormFusionConfig(model_margin=0).model_margin == 0
    assert selection._screen(NormFusionConfig(model_win_margin=1.3), True).win_margin == 1.3
    assert selection._screen(NormFusionConfig(model_margin=0, model_win_margin=1.3), True).win_margin == 0


def test_backend_option_is_checked():
    with pytest.raises(ValueError, match="gemm_backends.*'cutlass'"):
        NormFusionConfig(gemm_backends=("triton", "cutlass"))
    with pytest.raises(TypeError, match="gemm_backends"):
        NormFusionConfig(gemm_backends="quack")


# --- on the GPU, with Quack installed ---------------------------------------------------------------------------

QUACK_EPILOGUES = [
    eg.Epilogue(),
    eg.Epilogue(row_norm="rms"),
    eg.Epilogue(row_norm="rms", activation="silu", write_aux=True),
    eg.Epilogue(row_norm="rms", activation="silu_mul"),
    eg.Epilogue(row_norm="rms", activation="silu_mul", write_aux=True),
    eg.Epilogue(row_norm="ln", bias=True, activation="gelu"),
    eg.Epilogue(row_norm="ln", bias=True, activation="gelu", write_aux=True),
    eg.Epilogue(row_norm="ln", bias=True),
    eg.Epilogue(bias=True, activation="relu2", write_aux=True),
    eg.Epilogue(residual=True, stats="rms"),
    eg.Epilogue(bias=True, residual=True, stats="rms"),
]


@pytest.mark.skipif(not QUACK, reason="needs quack-kernels on an sm_90/sm_100 GPU")
@pytest.mark.parametrize("epilogue", QUACK_EPILOGUES, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_quack_epilogue_matches_float64(epilogue, dtype):
    M, K, N = 4096 + 64, 512, 1024 + 128  # tiles do not divide M or N
    torch.manual_seed(N)
    a, w, t = _operands(M, K, N, dtype, epilogue)
    out = torch.full((M, N // 2 if epilogue.gated else N), float("nan"), device="cuda", dtype=dtype)
    aux = torch.full((M, N), float("nan"), device="cuda", dtype=dtype) if epilogue.write_aux else None
    ref, z = fuzz_regrouped.reference64(a, w, epilogue, False, **t)
    assert qg.unsupported_reason(a, w, False, epilogue) is None
    out, aux_out, partials = qg.epilogue_gemm(a, w, epilogue=epilogue, out=out, aux=aux, tuned=False, **t)
    assert not out.isnan().any(), "an output element was not written"
    assert rel(out, ref) < 1e-2
    if aux is not None:
        assert not aux_out.isnan().any() and rel(aux_out, z) < 1e-2
    if epilogue.stats == "rms":
        rstd, _ = regrouped.finish_stats(partials, N, 1e-5, "rms")
        assert rel(rstd, torch.rsqrt(z.square().mean(-1) + 1e-5)) < 1e-3


class _RMSTower(nn.Module):
    def __init__(self, d=256, hidden=1024):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        x = x + self.fc2(torch.relu(self.fc1(self.norm1(x))))
        h = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


@pytest.mark.skipif(not QUACK, reason="needs quack-kernels on an sm_90/sm_100 GPU")
def test_model_trains_through_quack():
    torch.manual_seed(0)
    model = _RMSTower().cuda().to(torch.bfloat16)
    x = torch.randn(8, 512, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ref64 = _RMSTower().cuda().double()
    ref64.load_state_dict(model.state_dict())
    x64 = x.detach().double().requires_grad_()
    opts = {"norm_fusion": {"policy": "always", "fusions": nfi.KNOWN_FUSIONS, "gemm_backends": ("quack",)}}
    nfi.clear_reports()
    torch._dynamo.reset()
    out = torch.compile(model, backend="norm_fusion", options=opts)(x)
    sites = nfi.reports()
    out.float().square().mean().backward()
    ref = ref64(x64)
    ref.square().mean().backward()
    assert rel(out, ref) < 1e-2 and rel(x.grad, x64.grad) < 2e-2
    for p, p64 in zip(model.parameters(), ref64.parameters()):
        assert rel(p.grad, p64.grad) < 3e-2
    quack_sites = [s for s in sites if s.rewritten and "regrouped_quack" in s.implementation]
    assert quack_sites, [(s.rewritten, s.implementation, s.reason) for s in sites]
    assert not regrouped.QUACK_FAILED, regrouped.QUACK_FAILED


@pytest.mark.skipif(not QUACK, reason="needs quack-kernels on an sm_90/sm_100 GPU")
def test_quack_under_cuda_graphs():
    """mode "reduce-overhead" (CUDA graphs replay the step, so Quack's op calls cost no host time): the tower's
    GEMMs on Quack, replayed on fresh inputs copied into the same tensor, each against float64, outputs poisoned
    between replays."""
    torch.manual_seed(0)
    model = _RMSTower().cuda().to(torch.bfloat16).eval()
    ref64 = _RMSTower().cuda().double().eval()
    ref64.load_state_dict(model.state_dict())
    opts = {"norm_fusion": {"policy": "always", "fusions": nfi.KNOWN_FUSIONS, "gemm_backends": ("quack",)},
            "triton.cudagraphs": True}
    nfi.clear_reports()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="norm_fusion", options=opts)
    x = torch.empty(8, 512, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for step in range(4):  # warm-up, record, then replays
            x.copy_(torch.randn_like(x))
            torch.compiler.cudagraph_mark_step_begin()
            out = compiled(x)
            assert rel(out, ref64(x.double())) < 1e-2, step
            out.fill_(float("nan"))  # the next replay must write every element again
    quack_sites = [s for s in nfi.reports() if s.rewritten and "regrouped_quack" in s.implementation]
    assert quack_sites, [(s.rewritten, s.implementation, s.reason) for s in nfi.reports()]
    assert not regrouped.QUACK_FAILED, regrouped.QUACK_FAILED


def test_quack_config_is_kept_with_the_measurement(monkeypatch, tmp_path):
    """The shortlist config Quack ran with when the selection measured a GEMM is stored with the measurement; a
    later process that reads the measurement from the disk cache runs that config (with or without a bias)
    instead of timing the shortlist again. The GPU is faked; nothing is launched."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "fake GPU")
    monkeypatch.setattr(qg, "_TUNED", {})
    monkeypatch.setattr(selection, "_MEMORY", {})
    config = NormFusionConfig(cache_dir=str(tmp_path))
    site = selection.EpilogueSite(4096, 256, 512, torch.bfloat16, torch.device("cuda"), "rms", "silu_mul", False,
                                  "none", False, False, 4096)
    chosen = dict(qg.SM90_SHORTLIST[2])
    monkeypatch.setattr(selection, "_measure_epilogue", lambda site, screen=None, cache_root=None: dict(
        mm_ms=1.0, saved_ms=0.1, triton_ms=1.0, quack_ms=0.9, quack_config=chosen))
    selection._cached_epilogue(site, config)

    monkeypatch.setattr(qg, "_TUNED", {})  # a new process: memory empty, the disk cache kept
    monkeypatch.setattr(selection, "_MEMORY", {})
    monkeypatch.setattr(selection, "_measure_epilogue", lambda *args, **kwargs: pytest.fail("measured again"))
    assert selection._cached_epilogue(site, config)["quack_ms"] == 0.9
    for bias in (True, False):
        epilogue = eg.Epilogue(row_norm="rms", activation="silu_mul", bias=bias)
        assert qg.tuned_for(site.M, site.N, site.K, site.dtype, site.w_kn, epilogue) == chosen
    assert qg.tuned_for(site.M, site.N, site.K, torch.float16, site.w_kn, epilogue) is None


@pytest.mark.skipif(not QUACK, reason="needs quack-kernels on an sm_90/sm_100 GPU")
@pytest.mark.parametrize("epilogue", [eg.Epilogue(row_norm="rms", activation="silu_mul"),
                                      eg.Epilogue(row_norm="rms", bias=True, activation="silu"),
                                      eg.Epilogue(bias=True, residual=True, stats="rms")], ids=str)
def test_quack_shortlist_configs_match_float64(monkeypatch, epilogue):
    """Every config the shortlist offers this epilogue computes it (output and row statistics as float64's);
    tuned, the op times them once per shape bucket and epilogue and runs the fastest; a second call times
    nothing."""
    monkeypatch.setattr(qg, "_TUNED", {})
    M, K, N = 2048 + 64, 512, 1024
    a, w, t = _operands(M, K, N, torch.bfloat16, epilogue)
    ref, z = fuzz_regrouped.reference64(a, w, epilogue, False, **t)
    shortlist = qg._shortlist(a.device, epilogue)
    for config in shortlist:
        qg._TUNED[qg._key(M, N, K, a.dtype, False, epilogue)] = config
        out = torch.full(tuple(ref.shape), float("nan"), device="cuda", dtype=a.dtype)
        out, _, partials = qg.epilogue_gemm(a, w, epilogue=epilogue, out=out, **t)
        assert not out.isnan().any() and rel(out, ref) < 1e-2, config
        if epilogue.stats == "rms":
            rstd, _ = regrouped.finish_stats(partials, N, 1e-5, "rms")
            assert rel(rstd, torch.rsqrt(z.square().mean(-1) + 1e-5)) < 1e-3, config
    qg._TUNED.clear()
    qg.epilogue_gemm(a, w, epilogue=epilogue, **t)
    chosen = qg.tuned_for(M, N, K, a.dtype, False, epilogue)
    assert chosen in shortlist or not shortlist
    monkeypatch.setattr(qg, "fastest_config", lambda *args: pytest.fail("timed again"))
    qg.epilogue_gemm(a, w, epilogue=epilogue, **t)


def test_quack_jit_stops_at_the_compiles_budget_and_is_timed_later(monkeypatch, tmp_path):
    """Once a run of the pass has spent quack_jit_budget_s on Quack's JIT, the next GEMM is measured without
    compiling Quack, its reason names the budget, and that measurement is not stored: the next run (budget full
    again) times Quack there. Timers and kernels are faked; nothing is launched."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "fake GPU")
    monkeypatch.setattr(selection, "_MEMORY", {})
    monkeypatch.setattr(selection, "graph_ms", lambda fn: 1.0)
    monkeypatch.setattr(selection, "host_ms", lambda fn: 0.1)
    monkeypatch.setattr(selection, "_quack_reason", lambda site, a, w: None)
    monkeypatch.setattr(qg, "missing_reason", lambda: None)
    jits = []

    def time_quack(times, run, site, bound, rival, screen):
        jits.append(site.N)
        times["quack_ms"] = 0.9
        return None

    monkeypatch.setattr(selection, "_time_quack", time_quack)
    config = NormFusionConfig(cache_dir=str(tmp_path), gemm_backends=("quack",), model_margin=0,
                              quack_jit_budget_s=0.5)
    site = lambda n: selection.EpilogueSite(64, n, 32, torch.float32, torch.device("cpu"), "rms", "none",  # noqa: E731
                                            False, "none", False, False, 64 * 32 * 4)
    with selection.measurement_budgets(config.quack_jit_budget_s):
        first = selection._cached_epilogue(site(64), config)
        assert first["quack_ms"] == 0.9 and jits == [64]
        selection._QUACK_JIT["spent_s"] = 0.6  # the first JIT took longer than the budget
        second = selection._cached_epilogue(site(128), config)
        assert "quack_ms" not in second and "quack_jit_budget_s=0.5" in second["quack_reason"], second
        assert jits == [64]
    assert selection.pending_token(config)  # in the pass's uuid(): the FX graph cache misses until it is done
    later = time.time() + selection.PENDING_TTL_S + 1  # ... or until it is older than PENDING_TTL_S
    with monkeypatch.context() as clock:
        clock.setattr(selection.time, "time", lambda: later)
        assert selection.pending_token(config) == ""
    with selection.measurement_budgets(config.quack_jit_budget_s):  # the next compile
        assert selection._cached_epilogue(site(128), config)["quack_ms"] == 0.9 and jits == [64, 128]
        assert selection._cached_epilogue(site(64), config)["quack_ms"] == 0.9 and jits == [64, 128]  # stored
    assert selection._QUACK_JIT["budget_s"] == float("inf")  # none outside a run of the pass
    assert selection.pending_token(config) == ""


def test_a_probe_that_came_close_waits_for_a_later_compile_once_the_budget_is_spent(monkeypatch):
    """Quack's probe config came close enough that the shortlist would be tuned, but the probe's JIT spent the
    compile's budget: the probe's time stands, marked incomplete (a later compile tunes the shortlist)."""
    monkeypatch.setattr(qg, "_TUNED", {})
    monkeypatch.setattr(qg, "probe_config", lambda device, epilogue: dict(qg.PROBE_CONFIG))
    monkeypatch.setattr(selection, "graph_ms", lambda fn: 0.5)
    monkeypatch.setattr(selection, "host_ms", lambda fn: 0.01)
    site = selection.EpilogueSite(4096, 256, 512, torch.bfloat16, torch.device("cuda"), "rms", "none", False,
                                  "none", False, False, 4096)
    runs = []

    def run():  # the probe's JIT: longer than the budget
        runs.append(1)
        selection._QUACK_JIT["spent_s"] += 1.0

    times = {}
    with selection.measurement_budgets(0.5):
        reason = selection._time_quack(times, run, site, bound=10.0, rival=None, screen=selection.Screen(margin=1.2))
    assert reason is None and runs == [1] and times["quack_ms"] == 0.5, times
    assert times["incomplete"] and times["quack_probe_budget"], times
    times = {}
    qg._TUNED.clear()
    with selection.measurement_budgets(60.0):  # budget left: the shortlist is tuned after the probe
        selection._time_quack(times, run, site, bound=10.0, rival=None, screen=selection.Screen(margin=1.2))
    assert len(runs) == 3 and "incomplete" not in times, times


def test_triton_measurements_stop_at_the_compiles_budget_and_are_timed_later(monkeypatch, tmp_path):
    """Once a run of the pass has spent measure_budget_s compiling and timing Triton kernels, the next close call
    is not compiled: it stays unfused in this compile, its reason names the budget, and it is pending (the FX graph
    cache misses) until the next run times it. Timers faked; the GEMMs run on the CPU."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "fake GPU")
    monkeypatch.setattr(selection, "_MEMORY", {})
    monkeypatch.setattr(selection, "graph_ms", lambda fn: (fn(), 1.0)[1])
    monkeypatch.setattr(selection, "host_ms", lambda fn: 0.1)
    config = NormFusionConfig(cache_dir=str(tmp_path), gemm_backends=("triton",), model_margin=0,
                              measure_budget_s=0.5)
    site = lambda n: selection.EpilogueSite(64, n, 32, torch.float32, torch.device("cpu"), "rms", "none",  # noqa: E731
                                            False, "none", False, False, 64 * 32 * 4)
    with selection.measurement_budgets(config.quack_jit_budget_s, config.measure_budget_s):
        assert selection._cached_epilogue(site(64), config)["triton_ms"] == 1.0
        selection._TRITON_MEASURE["spent_s"] = 0.6  # the first took longer than the budget
        second = selection._cached_epilogue(site(128), config)
        assert "triton_ms" not in second and "measure_budget_s=0.5" in second["triton_reason"], second
    assert selection.pending_token(config)
    with selection.measurement_budgets(config.quack_jit_budget_s, config.measure_budget_s):  # the next compile
        assert selection._cached_epilogue(site(128), config)["triton_ms"] == 1.0
    assert selection._TRITON_MEASURE["budget_s"] == float("inf") and selection.pending_token(config) == ""
    with pytest.raises(ValueError, match="measure_budget_s"):
        NormFusionConfig(measure_budget_s=-1)
