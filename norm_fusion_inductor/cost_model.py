r"""A first cost model of the regrouped-normalization choice (issue 27: "decide in milliseconds").

``selection.choose_epilogue_gemm`` times, per GEMM of a regrouped chain, cuBLAS for the same product, a copy of
the bytes the fused epilogue saves and each backend's epilogue GEMM (Triton, Quack), and fuses where
``bound / fused >= min_speedup`` with ``bound = mm + saved``. This module predicts those four times from the shape
alone, so that a site far from the margin could be decided without compiling or timing anything. It is a
roofline with a few constants per GPU model, calibrated on the selection's own logged H200 measurements
(``benchmarks/cost_model.py`` parses them, refits the constants and reports in-sample and held-out accuracy).

Notation: one GEMM ``[M, K] @ [K, N]`` ("at MxKxN" in the selection's reasons), element size ``e`` bytes, ``P``
the nominal dense tensor-core peak for that element size (FLOP/ms), ``S`` the number of SMs, ``BW`` the DRAM
bandwidth a copy kernel reaches, ``BW_L2`` the rate of a working set that stays in L2 between the timer's
replays (bytes/ms).

Bytes. The L2-resident share of a working set of ``B`` bytes falls linearly from 1 at ``l2_lo`` to 0 at ``l2_hi``
(under ~L2 size the CUDA-graph timer's replays find the data in L2)::

    h(B)      = clamp((l2_hi - B) / (l2_hi - l2_lo), 0, 1)
    tau(B)    = h / BW_L2 + (1 - h) / BW                      # ms per byte

Copy of ``B`` saved bytes (the selection's copy kernel reads ``B/2`` and writes ``B/2``)::

    saved_ms  = c_copy + B · tau(B)

GEMM of backend ``b`` (``mm`` = cuBLAS, ``triton``, ``quack``) with the epilogue ``kind``::

    q         = max over tiles (tm, tn) in {128x256, 128x128, 64x128} of
                (M·N / (tm·tn)) / (ceil(ceil(M/tm)·ceil(N/tn) / S) · S)   # wave quantization: the SMs' busy share
    T_flops   = 2·M·N·K / (P · eff_b) · (1 + K0_b / K) / q · mu_b[kind]
    B_op      = e · (M·K + K·N)                               # the operands, read once
    B_epi     = w[kind] · M·N·e                               # what the epilogue writes and reads
    T_epi     = B_epi · tau(B_op + B_epi)
    T_bytes   = B_op · tau(B_op + B_epi) + T_epi
    T_alu     = M·N_out · alu_b[activation]                   # the activation's arithmetic after the main loop
    t_b       = c_b + max(T_flops, T_bytes) + rho · min(T_flops, T_bytes) + lam_b · T_epi + T_alu

``eff_b``: the fraction of the peak the main loop reaches; ``K0_b``: the per-tile fixed cost (prologue, the
epilogue's pass over the accumulator) in units of K, so a short K reaches less of the peak; ``rho``: how much
of the smaller of compute and traffic is not hidden under the larger (one constant for all backends, fitted on
cuBLAS); ``lam_b``: the share of the epilogue's traffic not overlapped with the main loop (a persistent kernel
without warp specialization, Triton's, stores after its K loop: ~1; cuBLAS and Quack overlap most of it);
``c_b``: the fixed cost of one launch under a CUDA graph; ``alu_b[activation]``: the activation's cost per output
element (``N_out`` = N, or N/2 for a gated pair), measured piece by piece rather than fitted
(``benchmarks/diagnostics/epilogue_configs.py --pieces``: additive and the same at every shape measured, since
Triton's epilogue runs after its main loop, MUFU-bound for σ, tanh and erf; 0 for Quack, whose epilogue overlaps
the next tile's main loop); ``mu_b[kind]``: a per-kind factor on the main loop
(registers, the epilogue's math; 1 for ``consumer_rms`` and for a kind without measurements). The epilogue's
traffic ``w[kind]`` in units of ``M·N·e``::

    plain (cuBLAS), consumer_rms, consumer_ln, activation, per_head : 1   (the output's write)
    gated (act(gate)·up; N counts gate and up)                       : 0.5 (the product's write)
    producer_rms, producer_ln                                        : 2   (the stream's write, the residual's read)
    + 1 with ``aux`` (training: the activation's input written for the backward)

The predicted speedup of a backend is ``(mm_ms + saved_ms) / t_b``; the selection fuses where the best timed
backend (plus any per-call weight fold, which it charges at the copy's rate) beats that bound by ``min_speedup``.

Quack is not offered for LayerNorm statistics in the producer (centred per-tile sums) nor for a per-head norm
(``kernels/quack_epilogue_gemm.unsupported_reason``): ``quack_ms`` is then None.

Its accuracy against the logged measurements: ``python benchmarks/cost_model.py`` (BENCHMARKS.md). The
selection uses it as a screen only (``selection.Screen``): a backend predicted to miss the measured bound by
``model_margin`` beyond ``min_speedup`` is not compiled; near the margin the model is not accurate enough, and
every other backend is timed.

Other GPU models: ``python -m norm_fusion_inductor calibrate`` (``calibrate.py``) measures the selection's times on
a grid of sites on this GPU, fits the constants the same way and writes them to ``calibration_file(gpu)``
(``<cache folder>/calibration/<GPU name>.json``). ``calibration(gpu)`` and ``predict`` take that file where there
is one (a measured file overrides the committed table of its GPU model), else ``CALIBRATION``; each is read once
per process (``clear_calibration_cache`` forgets them).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import re
from typing import Optional

KINDS = ("consumer_rms", "consumer_ln", "activation", "gated", "per_head", "producer_rms", "producer_ln")
# the kinds Quack's epilogue GEMM takes (quack_epilogue_gemm.unsupported_reason): not LayerNorm statistics in the
# producer, not a per-head norm
QUACK_KINDS = ("consumer_rms", "consumer_ln", "activation", "gated", "producer_rms")

# epilogue traffic per output element, in units of M·N·e (see the module docstring)
EPILOGUE_PASSES = {"consumer_rms": 1.0, "consumer_ln": 1.0, "activation": 1.0, "per_head": 1.0, "gated": 0.5,
                   "producer_rms": 2.0, "producer_ln": 2.0}
# output tiles the kernels' configs use (Hopper: 128x256 for large products, smaller where few tiles would leave
# SMs idle); the wave quantization takes the best of them
TILES = ((128, 256), (128, 128), (64, 128))

# Per GPU model (torch.cuda.get_device_name): hardware data and the calibrated constants. Times in ms, bytes in
# bytes, rates in bytes/ms and FLOP/ms. "H200": constants fitted by ``python benchmarks/cost_model.py --fit`` (a
# robust fit) on the selection's logged bf16 records with the activations' alu_ps fixed; see
# docs/decisions.md#cost_modelcalibration. "H100 80GB HBM3" (SXM): the calibrate command's grid
CALIBRATION: dict = {
    "NVIDIA H200": {
        "sms": 132,
        # nominal dense tensor-core peaks per element size (bf16/fp16: 989.4 TFLOP/s; fp8; tf32) in FLOP/ms
        "peak_flops": {1: 1978.9e9, 2: 989.4e9, 4: 494.7e9},
        "hbm_bytes_per_ms": 4.8e9,  # nominal
        "l2_bytes": 50e6,
        # fitted (benchmarks/cost_model.py --fit), rounded
        "copy": {"bw": 4.123e9, "bw_l2": 8.349e9, "c": 0.001581, "l2_lo": 29.81e6, "l2_hi": 53.39e6},
        "mm": {"eff": 0.7359, "k0": 0.0, "rho": 0.04648, "lam": 0.4793, "c": 0.001949, "mu": {}},
        "triton": {"eff": 0.7458, "k0": 0.0, "rho": 0.04648, "lam": 0.8711, "c": 0.006502,
                   # measured, not fitted (--pieces at two shapes, ps per output element; gelu: the 16-bit erf,
                   # 0.62-0.91; gelu_fp32: the fp32 outputs' erf, 1.03-1.55 as measured on bf16 outputs before
                   # they took the 16-bit one; an activation not listed: 0)
                   # (_fast: σ and tanh on one MUFU operation, bf16 outputs; --pieces at two shapes:
                   # silu 0.14-0.16, gelu_tanh 0.31-0.50, gelu 0.32-0.77)
                   "alu_ps": {"relu": 0.02, "silu": 0.57, "gelu_tanh": 0.63, "gelu": 0.76, "gelu_fp32": 1.3,
                              "silu_fast": 0.15, "gelu_tanh_fast": 0.35, "gelu_fast": 0.45},
                   "mu": {"activation": 0.9657, "consumer_ln": 0.889, "gated": 1.042, "per_head": 1.024,
                          "producer_ln": 1.382, "producer_rms": 1.204}},
        "quack": {"eff": 0.7564, "k0": 129.4, "rho": 0.04648, "lam": 0.1961, "c": 0.006242,
                  "mu": {"activation": 1.344, "gated": 1.014, "producer_rms": 1.031}},
    },
    # `python -m norm_fusion_inductor calibrate --backends triton` (the 27-site grid, one timing each; torch 2.11,
    # triton 3.6), rounded: benchmarks/results/gpu-2026-12-05b/call_b. Fitted on fewer sites than the H200's;
    # alu_ps fitted for the one-MUFU forms the grid has (the others as the H200's); no Quack constants (not
    # screened: timed where installed)
    "NVIDIA H100 80GB HBM3": {
        "sms": 132,
        "peak_flops": {1: 1978.9e9, 2: 989.4e9, 4: 494.7e9},
        "hbm_bytes_per_ms": 3.35e9,  # nominal
        "l2_bytes": 52428800,
        "copy": {"bw": 3.015e9, "bw_l2": 6.877e9, "c": 0.001346, "l2_lo": 27.40e6, "l2_hi": 50.97e6},
        "mm": {"eff": 0.8397, "k0": 109.1, "rho": 0.04472, "lam": 0.06728, "c": 0.006243, "mu": {}},
        "triton": {"eff": 0.8575, "k0": 0.0, "rho": 0.04472, "lam": 0.9107, "c": 0.008975,
                   "alu_ps": {"relu": 0.02, "silu": 0.57, "gelu_tanh": 0.63, "gelu": 0.76, "gelu_fp32": 1.3,
                              "silu_fast": 0.01883, "gelu_tanh_fast": 0.35, "gelu_fast": 0.08735},
                   "mu": {"activation": 1.016, "consumer_ln": 0.9079, "gated": 0.9947, "per_head": 0.9998,
                          "producer_ln": 1.241, "producer_rms": 1.013}},
    },
}


def kind_of(row_norm: str, activation: str, stats: str, head_dim: int = 0) -> Optional[str]:
    """The epilogue kind (``KINDS``) of a regrouped GEMM as ``selection.EpilogueSite`` describes it: a consumer
    (``row_norm`` "rms"/"ln", with an activation, a gated one "..._mul", or a per-head norm) or the stream's
    producer (``stats`` "rms"/"ln"); None for an epilogue the model has no kind for."""
    if head_dim:
        return "per_head"
    if row_norm in ("rms", "ln"):
        if activation.endswith("_mul"):
            return "gated"
        return "activation" if activation != "none" else f"consumer_{row_norm}"
    return f"producer_{stats}" if stats in ("rms", "ln") else None


def calibration_file(gpu: str, cache_root: Optional[str] = None) -> str:
    """Where ``python -m norm_fusion_inductor calibrate`` writes the measured constants of ``gpu`` and where
    ``calibration`` looks for them: ``<cache folder>/calibration/<gpu>.json``, the cache folder being
    ``cache_root`` or the plugin's default (``NormFusionConfig().cache_root``: ~/.cache/norm_fusion_inductor)."""
    from .config import NormFusionConfig

    root = cache_root if cache_root is not None else NormFusionConfig().cache_root
    return os.path.join(root, "calibration", re.sub(r"[^A-Za-z0-9._-]+", "_", gpu).strip("_") + ".json")


def read_calibration_file(path: str) -> dict:
    """The constants in a file ``calibrate`` wrote (its "calibration"), checked by one prediction; raises
    OSError, ValueError, KeyError or TypeError for a file that is not one."""
    with open(path) as f:
        cal = json.load(f)["calibration"]
    cal["peak_flops"] = {int(e): float(p) for e, p in cal["peak_flops"].items()}  # JSON's keys are strings
    predict_with(cal, 4096, 4096, 4096, 2, "consumer_rms", 1e6)
    return cal


_IN_USE: dict = {}  # (cache_root, gpu) -> the constants in use, read once per process


def clear_calibration_cache() -> None:
    """Forget the constants read so far: the next ``calibration`` or ``predict`` reads the files again."""
    _IN_USE.clear()


def _in_use(gpu: str, cache_root: Optional[str] = None) -> Optional[dict]:
    """``gpu``'s measured file, else its committed table, else None (not copied: read only)."""
    key = (cache_root, gpu)
    if key not in _IN_USE:
        path, cal = calibration_file(gpu, cache_root), None
        if os.path.exists(path):
            try:
                cal = read_calibration_file(path)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                logging.getLogger("norm_fusion_inductor").warning(
                    "cost model: ignoring the calibration file %s (%s: %s)", path, type(e).__name__, e)
        _IN_USE[key] = cal if cal is not None else CALIBRATION.get(gpu)
    return _IN_USE[key]


def calibration(gpu: str = "NVIDIA H200", cache_root: Optional[str] = None) -> Optional[dict]:
    """The constants of ``gpu`` (a deep copy: change it freely and pass it to ``predict_with``): those measured by
    ``python -m norm_fusion_inductor calibrate`` where ``calibration_file(gpu, cache_root)`` exists (a measured
    file overrides the committed table of its GPU model), else the committed ``CALIBRATION[gpu]``, else None."""
    cal = _in_use(gpu, cache_root)
    return copy.deepcopy(cal) if cal is not None else None


def calibration_hash(gpu: str, cache_root: Optional[str] = None) -> str:
    """A short hash of the constants ``calibration(gpu, cache_root)`` gives ("none" without any): part of the
    selection's cache key, since the cost-model screen's outcome depends on them."""
    cal = _in_use(gpu, cache_root)
    if cal is None:
        return "none"
    return hashlib.sha256(json.dumps(cal, sort_keys=True).encode()).hexdigest()[:12]


def ms_per_byte(cal: dict, working_set: float) -> float:
    """DRAM time per byte, lower for a working set that stays in L2 between the timer's replays: the resident
    fraction falls linearly from 1 at ``l2_lo`` to 0 at ``l2_hi`` bytes."""
    c = cal["copy"]
    hit = min(max((c["l2_hi"] - working_set) / (c["l2_hi"] - c["l2_lo"]), 0.0), 1.0)
    return hit / c["bw_l2"] + (1.0 - hit) / c["bw"]


def copy_ms(cal: dict, nbytes: float) -> float:
    """A copy kernel moving ``nbytes`` in all (read + write), as the selection times the saved bytes."""
    if nbytes <= 0:
        return 0.0
    return cal["copy"]["c"] + nbytes * ms_per_byte(cal, nbytes)


def wave_efficiency(M: int, N: int, sms: int) -> float:
    """The share of the SMs' tile slots doing useful work (padding of partial tiles and the last wave's idle
    SMs counted), for the best of ``TILES``."""
    best = 0.0
    for tm, tn in TILES:
        tiles = math.ceil(M / tm) * math.ceil(N / tn)
        best = max(best, M * N / (tm * tn) / (math.ceil(tiles / sms) * sms))
    return best


# the activations whose σ or tanh the kernel can take on one MUFU operation (epilogue_gemm.fast_sigmoid)
FAST_SIGMOID_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


def priced_activation(activation: Optional[str], fast_sigmoid: bool) -> Optional[str]:
    """The name ``alu_ps`` prices ``activation`` by, as the kernel runs it: with σ and tanh on one MUFU operation
    (``fast_sigmoid``: bf16 outputs, ``tuning.epilogue_fast_sigmoid``) "silu" is "silu_fast" and a gated
    "silu_mul" is "silu_fast_mul"."""
    if not fast_sigmoid or not activation:
        return activation
    gated = activation.endswith("_mul")
    name = activation[:-len("_mul")] if gated else activation
    if name not in FAST_SIGMOID_ACTIVATIONS:
        return activation
    return name + "_fast" + ("_mul" if gated else "")


def alu_name(activation: Optional[str], elem_bytes: int) -> Optional[str]:
    """The ``alu_ps`` entry that prices ``activation`` (a gated pair "silu_mul" by its gate's activation; GELU
    with fp32 outputs by "gelu_fp32"); None for none."""
    if not activation or activation == "none":
        return None
    name = activation[:-len("_mul")] if activation.endswith("_mul") else activation
    return "gelu_fp32" if name == "gelu" and elem_bytes == 4 else name


def alu_ms(cal: dict, backend: str, M: int, N: int, elem_bytes: int, activation: Optional[str]) -> float:
    """The activation's arithmetic in ``backend``'s epilogue (``alu_ps`` per output element; a gated pair
    ("silu_mul") is its gate's activation over N/2 outputs; ``priced_activation`` names the one-MUFU forms)."""
    name = alu_name(activation, elem_bytes)
    if name is None:
        return 0.0
    outputs = N // 2 if activation.endswith("_mul") else N
    return M * outputs * cal[backend].get("alu_ps", {}).get(name, 0.0) * 1e-9


def gemm_ms(cal: dict, backend: str, M: int, N: int, K: int, elem_bytes: int = 2, kind: str = "plain",
            aux: bool = False, activation: Optional[str] = None) -> float:
    """One GEMM on ``backend`` ("mm": cuBLAS, "triton", "quack") with the epilogue ``kind`` ("plain" for
    cuBLAS's output write alone) and ``activation`` (its name as the epilogue's, e.g. "silu" or "silu_mul")."""
    b = cal[backend]
    peak = cal["peak_flops"].get(elem_bytes) or cal["peak_flops"][2] * 2 / elem_bytes
    q = wave_efficiency(M, N, cal["sms"])
    t_flops = 2.0 * M * N * K / (peak * b["eff"]) * (1.0 + b["k0"] / K) / q * b["mu"].get(kind, 1.0)
    passes = (1.0 if kind == "plain" else EPILOGUE_PASSES[kind]) + (1.0 if aux else 0.0)
    operands, epilogue = elem_bytes * (M * K + K * N), passes * M * N * elem_bytes
    per_byte = ms_per_byte(cal, operands + epilogue)
    t_epi = epilogue * per_byte
    t_bytes = operands * per_byte + t_epi
    return (b["c"] + max(t_flops, t_bytes) + b["rho"] * min(t_flops, t_bytes) + b["lam"] * t_epi
            + alu_ms(cal, backend, M, N, elem_bytes, activation))


def predict_with(cal: dict, M: int, N: int, K: int, elem_bytes: int, kind: str, saved_bytes: float, *,
                 aux: bool = False, activation: Optional[str] = None) -> dict:
    """``predict`` with explicit constants (``calibration(gpu)``, possibly changed)."""
    if kind not in KINDS:
        raise ValueError(f"unknown epilogue kind {kind!r} (one of {KINDS})")
    out = {"mm_ms": gemm_ms(cal, "mm", M, N, K, elem_bytes),
           "saved_ms": copy_ms(cal, saved_bytes),
           "triton_ms": gemm_ms(cal, "triton", M, N, K, elem_bytes, kind, aux, activation)
           if "triton" in cal else None,
           "quack_ms": gemm_ms(cal, "quack", M, N, K, elem_bytes, kind, aux, activation)
           if kind in QUACK_KINDS and "quack" in cal else None}
    bound = out["mm_ms"] + out["saved_ms"]
    out["bound_ms"] = bound
    for b in ("triton", "quack"):
        out[f"{b}_speedup"] = bound / out[f"{b}_ms"] if out[f"{b}_ms"] is not None else None
    return out


def predict(M: int, N: int, K: int, elem_bytes: int, kind: str, saved_bytes: float, gpu: str = "NVIDIA H200", *,
            aux: bool = False, activation: Optional[str] = None, cache_root: Optional[str] = None) -> Optional[dict]:
    """Predicted GPU times (ms, under a CUDA graph) of one regrouped GEMM site ``[M, K] @ [K, N]``:

    ``{"mm_ms", "saved_ms", "triton_ms", "quack_ms", "bound_ms", "triton_speedup", "quack_speedup"}`` —
    cuBLAS for the product, a copy of ``saved_bytes`` (``EpilogueSite.saved_bytes``), the epilogue GEMM on each
    backend (``quack_ms`` None where Quack does not take ``kind``), the unfused lower bound ``mm + saved`` and
    each backend's bound / fused. ``kind``: one of ``KINDS``; ``aux``: the epilogue also writes the
    activation's input (training); ``activation``: the epilogue's activation ("silu", "silu_mul", ...). The
    constants are ``calibration(gpu, cache_root)``'s: a measured file where there is one, else the committed
    table; None for a GPU model without either. A backend without constants (a calibration measured without it)
    has None for its times."""
    cal = _in_use(gpu, cache_root)
    if cal is None:
        return None
    return predict_with(cal, M, N, K, elem_bytes, kind, saved_bytes, aux=aux, activation=activation)
