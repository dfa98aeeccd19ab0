r"""The cost model's constants for one GPU model, measured: ``python -m norm_fusion_inductor calibrate``.

``cost_model.CALIBRATION`` holds, per GPU model, the hardware data and the fitted constants of the roofline
(each backend's main-loop efficiency ``eff``, fixed cost per tile ``k0``, per-kind factor ``mu``, the copy's
bandwidths). The H200's are committed; for another GPU model this module measures them. The selection's own
measurement (``selection._measure_epilogue``: cuBLAS, a copy of the saved bytes, each backend's epilogue GEMM,
the cost-model screen off) runs on a fixed grid of regrouped GEMM sites (``SITES``, or ``QUICK_SITES``), ``fit``
fits the constants, and the result is written as JSON to ``cost_model.calibration_file(gpu)``, where the cost
model reads it (a measured file overrides the committed table of its GPU model). ``benchmarks/cost_model.py``
fits the same ``fit`` to the measurements the selection logged.

The fit, per component in turn (the copy, then cuBLAS, Triton and Quack, each with the copy's fitted
bandwidth), minimises over that component's constants ``θ`` (within ``FIT_BOUNDS``)::

    Σ_records  (w_s · log(t_model(s; θ) / t_measured))²        w_s = 1 / sqrt(records of the site s)

so that each site (shape, kind, aux, activation) weighs the same however often it was measured. A factor
``mu[kind]`` (within ``MU_BOUNDS``) is fitted for each kind a backend has records of, except ``REFERENCE_KIND``
(``mu`` = 1: ``eff`` is that kind's); the ``TIED`` constants of the epilogue GEMMs are cuBLAS's. With
``fit_alu`` (the command) the Triton epilogue's cost per output element of each activation the records have
(``alu_ps``, within ``ALU_BOUNDS``) is fitted too; else (``benchmarks/cost_model.py``, whose ``alu_ps`` were
measured piece by piece) they stay as in the starting table. The command's fit starts from the GPU model's
committed table, else from the reference GPU's with this GPU's hardware data (``hardware``), to which
``fit_bounds`` scales the copy's bounds.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import statistics
import time
from typing import NamedTuple, Optional, Sequence

from . import cost_model as cm

REFERENCE_GPU = "NVIDIA H200"  # the committed table: the starting point of a fit, and what FIT_BOUNDS were set for
FIT_BOUNDS = {  # per component: the fitted constants and their bounds (the rest of the calibration stays)
    "copy": {"bw": (2e9, 6e9), "bw_l2": (3e9, 2e10), "c": (0.0, 0.01), "l2_lo": (5e6, 60e6), "l2_hi": (20e6, 120e6)},
    "mm": {"eff": (0.3, 1.0), "k0": (0.0, 1000.0), "rho": (0.0, 1.0), "lam": (0.0, 3.0), "c": (0.0, 0.02)},
    "triton": {"eff": (0.3, 1.0), "k0": (0.0, 1000.0), "rho": (0.0, 1.0), "lam": (0.0, 3.0), "c": (0.0, 0.02)},
    "quack": {"eff": (0.3, 1.0), "k0": (0.0, 1000.0), "rho": (0.0, 1.0), "lam": (0.0, 3.0), "c": (0.0, 0.02)},
}
MU_BOUNDS = (0.7, 2.0)
ALU_BOUNDS = (0.0, 5.0)  # ps per output element
TIED = ("rho",)  # constants of the epilogue GEMMs taken from cuBLAS's fit
REFERENCE_KIND = "consumer_rms"  # its mu stays 1: eff is that kind's


@dataclasses.dataclass
class Measurement:
    """One timed regrouped GEMM site ``[M, K] @ [K, N]``: the model's inputs and the measured GPU ms (under a CUDA
    graph). ``activation``: the name whose ``alu_ps`` prices the epilogue's activation ("silu", "silu_mul", ...;
    None for none); ``aux``: the epilogue also writes the activation's input. ``triton_ms`` / ``quack_ms``: None
    where that backend was not timed."""
    M: int
    K: int
    N: int
    kind: str  # cost_model.KINDS
    mm_ms: float
    saved_bytes: float
    saved_ms: float
    triton_ms: Optional[float] = None
    quack_ms: Optional[float] = None
    activation: Optional[str] = None
    aux: bool = False
    elem_bytes: int = 2


def fit_bounds(cal: dict) -> dict:
    """``FIT_BOUNDS`` for the GPU of ``cal``: the copy's bandwidths scaled by its DRAM bandwidth
    (``hbm_bytes_per_ms``), the L2 thresholds by its L2 size, each relative to the reference GPU's."""
    ref = cm.CALIBRATION[REFERENCE_GPU]
    bw = cal.get("hbm_bytes_per_ms", ref["hbm_bytes_per_ms"]) / ref["hbm_bytes_per_ms"]
    l2 = cal.get("l2_bytes", ref["l2_bytes"]) / ref["l2_bytes"]
    bounds = copy.deepcopy(FIT_BOUNDS)
    for name, factor in (("bw", bw), ("bw_l2", bw), ("l2_lo", l2), ("l2_hi", l2)):
        lo, hi = bounds["copy"][name]
        bounds["copy"][name] = (lo * factor, hi * factor)
    return bounds


def _measured(r: Measurement, comp: str) -> Optional[float]:
    return r.mm_ms if comp == "mm" else getattr(r, f"{comp}_ms")


def _site(r: Measurement, comp: str) -> tuple:
    """The site ``r`` measured, for ``comp``: cuBLAS's product is the same for every epilogue."""
    return (r.M, r.K, r.N) if comp == "mm" else (r.M, r.K, r.N, r.kind, r.aux, r.activation, r.elem_bytes)


def fit(records: Sequence[Measurement], base: Optional[dict] = None, fit_alu: bool = False) -> dict:
    """Constants fitted to ``records`` (the module docstring), starting from ``base`` (a calibration with the
    GPU's hardware data; default: the reference GPU's table) and within ``fit_bounds(base)``. A component
    without records keeps ``base``'s constants (its ``mu`` emptied). ``fit_alu``: Triton's ``alu_ps`` of the
    records' activations fitted too."""
    try:
        import numpy as np
        from scipy.optimize import least_squares
    except ImportError as e:
        raise ImportError(f"fitting the cost model needs scipy: pip install scipy ({e})") from e

    cal = copy.deepcopy(base or cm.CALIBRATION[REFERENCE_GPU])
    bounds = fit_bounds(cal)
    for comp in ("copy", "mm", "triton", "quack"):
        if comp not in cal:  # a table without this backend (the H100's: no Quack): the reference's start, if timed
            if not any(_measured(r, comp) is not None for r in records):
                continue
            cal[comp] = copy.deepcopy(cm.CALIBRATION[REFERENCE_GPU][comp])
        if comp in ("triton", "quack"):
            for n in TIED:
                cal[comp][n] = cal["mm"][n]
        names = [n for n in bounds[comp] if comp not in ("triton", "quack") or n not in TIED]
        weight: dict = {}
        sites: dict = {}
        alus: list = []
        if comp == "copy":
            rows = sorted({(r.saved_bytes, r.saved_ms) for r in records if r.saved_bytes > 0})
            kinds = []
        else:
            rows = [r for r in records if _measured(r, comp) is not None]
            kinds = sorted({r.kind for r in rows} - {REFERENCE_KIND}) if comp != "mm" else []
            cal[comp]["mu"] = {}
            count: dict = {}
            for r in rows:
                count[_site(r, comp)] = count.get(_site(r, comp), 0) + 1
            weight = {id(r): 1.0 / math.sqrt(count[_site(r, comp)]) for r in rows}
            sites = {_site(r, comp): r for r in rows}
            if fit_alu and comp == "triton":
                alus = sorted({cm.alu_name(r.activation, r.elem_bytes) for r in rows} - {None})
        if not rows:
            continue
        alu_ps = cal[comp].setdefault("alu_ps", {}) if alus else {}
        lo = [bounds[comp][n][0] for n in names] + [MU_BOUNDS[0]] * len(kinds) + [ALU_BOUNDS[0]] * len(alus)
        hi = [bounds[comp][n][1] for n in names] + [MU_BOUNDS[1]] * len(kinds) + [ALU_BOUNDS[1]] * len(alus)
        scale = np.array([max(abs(h), 1e-12) for h in hi])
        x0 = ([min(max(cal[comp][n], lo[i]), hi[i]) for i, n in enumerate(names)] + [1.0] * len(kinds)
              + [min(max(alu_ps.get(a, 0.5), ALU_BOUNDS[0]), ALU_BOUNDS[1]) for a in alus])

        def put(x, comp=comp, names=names, kinds=kinds, alus=alus):
            for n, v in zip(names, x[:len(names)]):
                cal[comp][n] = float(v)
            if kinds:
                cal[comp]["mu"] = {k: float(v) for k, v in zip(kinds, x[len(names):len(names) + len(kinds)])}
            for a, v in zip(alus, x[len(names) + len(kinds):]):
                cal[comp]["alu_ps"][a] = float(v)

        def resid(x, comp=comp, rows=rows, put=put, sites=sites, weight=weight):
            put(x * scale)
            if comp == "copy":
                return [math.log(cm.copy_ms(cal, b) / ms) for b, ms in rows]
            preds = {}  # one prediction per site: the records of a site differ only in their measurement
            for key, r in sites.items():
                preds[key] = (cm.gemm_ms(cal, "mm", r.M, r.N, r.K, r.elem_bytes) if comp == "mm" else
                              cm.gemm_ms(cal, comp, r.M, r.N, r.K, r.elem_bytes, r.kind, r.aux, r.activation))
            return [weight[id(r)] * math.log(preds[_site(r, comp)] / _measured(r, comp)) for r in rows]

        # a Cauchy loss: a few records timed under load must not pull every constant
        # (docs/decisions.md#cost_modelcalibration)
        sol = least_squares(resid, np.array(x0) / scale, bounds=(np.array(lo) / scale, np.array(hi) / scale),
                            x_scale="jac", max_nfev=2000, loss="cauchy", f_scale=0.05)
        put(sol.x * scale)
    return cal


def predicted(cal: dict, r: Measurement) -> dict:
    """The model's ms with ``cal`` for what ``r`` measured (``{"mm_ms", "saved_ms", "triton_ms", "quack_ms"}``,
    None for a backend ``r`` has no time of or ``cal`` no constants for)."""
    out = {"mm_ms": cm.gemm_ms(cal, "mm", r.M, r.N, r.K, r.elem_bytes),
           "saved_ms": cm.copy_ms(cal, r.saved_bytes)}
    for b in ("triton", "quack"):
        out[f"{b}_ms"] = (cm.gemm_ms(cal, b, r.M, r.N, r.K, r.elem_bytes, r.kind, r.aux, r.activation)
                          if _measured(r, b) is not None and b in cal else None)
    return out


def errors(cal: dict, records: Sequence[Measurement]) -> dict:
    """|predicted / measured − 1| of every measured time, per component ("mm", "saved", "triton", "quack")."""
    out: dict = {"mm": [], "saved": [], "triton": [], "quack": []}
    for r in records:
        p = predicted(cal, r)
        for c in out:
            m = _measured(r, c) if c != "saved" else r.saved_ms
            if m is not None and p[f"{c}_ms"] is not None and (c != "saved" or r.saved_bytes > 0):
                out[c].append(abs(p[f"{c}_ms"] / m - 1.0))
    return out


# ---------------------------------------------------------------------------------------------------------------
# the measurement (CUDA)

class GridSite(NamedTuple):
    """One regrouped GEMM ``[M, K] @ [K, N]`` of the calibration grid: its epilogue ``kind``, the activation and
    whether the epilogue writes the activation's input (``aux``, training)."""
    kind: str
    M: int
    K: int
    N: int
    activation: str = "none"
    aux: bool = False


# every kind at the M, K and N the benchmarks' blocks run (M 16k–256k tokens, K and N 256–4096), bf16; the saved
# bytes span 8 MB (the copy within L2) to 1.6 GB
SITES = (
    GridSite("consumer_rms", 16384, 4096, 4096), GridSite("consumer_rms", 65536, 1024, 1024),
    GridSite("consumer_rms", 131072, 2048, 512), GridSite("consumer_rms", 262144, 256, 1024),
    GridSite("consumer_rms", 65536, 4096, 2048), GridSite("consumer_rms", 16384, 512, 2048),
    GridSite("consumer_ln", 16384, 1024, 4096), GridSite("consumer_ln", 65536, 512, 2048),
    GridSite("consumer_ln", 262144, 1024, 256), GridSite("consumer_ln", 16384, 256, 1024),
    GridSite("activation", 16384, 2048, 4096, "silu"), GridSite("activation", 131072, 512, 2048, "silu"),
    GridSite("activation", 65536, 1024, 4096, "silu", aux=True),
    GridSite("activation", 65536, 2048, 1024, "gelu"), GridSite("activation", 262144, 256, 512, "gelu"),
    GridSite("gated", 16384, 2048, 4096, "silu_mul"), GridSite("gated", 65536, 1024, 2048, "silu_mul"),
    GridSite("gated", 131072, 4096, 1024, "silu_mul"),
    GridSite("producer_rms", 16384, 4096, 1024), GridSite("producer_rms", 65536, 2048, 2048),
    GridSite("producer_rms", 131072, 1024, 512), GridSite("producer_rms", 262144, 512, 256),
    GridSite("producer_ln", 16384, 4096, 1024), GridSite("producer_ln", 65536, 1024, 512),
    GridSite("producer_ln", 262144, 2048, 256),
    GridSite("per_head", 65536, 2048, 512), GridSite("per_head", 16384, 4096, 1024),
)
# a smoke test of the command: three kinds besides the reference, eight shapes; its constants are loosely
# determined (eight times for up to seven constants per backend)
QUICK_SITES = (
    GridSite("consumer_rms", 16384, 512, 1024), GridSite("consumer_rms", 65536, 2048, 512),
    GridSite("consumer_rms", 131072, 256, 1024),
    GridSite("activation", 16384, 2048, 4096, "silu"), GridSite("activation", 65536, 512, 2048, "silu"),
    GridSite("gated", 65536, 1024, 2048, "silu_mul"),
    GridSite("producer_rms", 16384, 4096, 1024), GridSite("producer_rms", 131072, 1024, 512),
)
HEAD_DIM = 128  # the per-head norm's head size

# Nominal dense tensor-core peaks (FLOP/ms per element size: fp8, bf16/fp16, tf32) and DRAM bandwidth (bytes/ms)
# of sm_90+ GPU models without a committed table, by torch.cuda.get_device_name; another model's are estimated
NOMINAL = {
    "NVIDIA H100 PCIe": {"peak_flops": {1: 1513e9, 2: 756.5e9, 4: 378e9}, "hbm_bytes_per_ms": 2.0e9},
    "NVIDIA H100 NVL": {"peak_flops": {1: 1670.5e9, 2: 835.5e9, 4: 417.5e9}, "hbm_bytes_per_ms": 3.9e9},
    "NVIDIA B200": {"peak_flops": {1: 4500e9, 2: 2250e9, 4: 1125e9}, "hbm_bytes_per_ms": 8.0e9},
}
# an unknown GPU's nominal figures from measured rates: cuBLAS at PEAK_GEMM³ (bf16) and a copy kernel over
# PEAK_COPY_BYTES, each divided by a share at or under what the reference GPU reaches there (cuBLAS 0.7–0.8 of its
# nominal peak, its copy kernel 0.86–0.9 of its nominal bandwidth), so that the fitted efficiencies stay under 1
PEAK_GEMM = 8192
PEAK_COPY_BYTES = 2 ** 31
MEASURED_SHARE = {"gemm": 0.7, "copy": 0.86}


def default_backends() -> tuple:
    """Triton, and Quack where quack-kernels is installed."""
    from .kernels import quack_epilogue_gemm as qg

    return ("triton", "quack") if qg.version() != "no quack" else ("triton",)


def epilogue_site(g: GridSite, device, dtype=None):
    """``g`` as the selection describes a GEMM (``sites.EpilogueSite``; weights [N, K]), with the saved bytes
    ``choose_epilogue_gemm`` counts: a consumer's normalized tensor (one consumer) and the output's round trip
    through the activation or the per-head norm (less the aux write); the producer's output written and read
    again by the residual add."""
    import torch

    from .sites import EpilogueSite

    dtype = dtype or torch.bfloat16
    e = torch.empty((), dtype=dtype).element_size()
    producer = g.kind.startswith("producer_")
    head_dim = HEAD_DIM if g.kind == "per_head" else 0
    out = g.M * g.N * e
    if producer:
        saved = 2 * out
    else:
        saved = g.M * g.K * e + (2 * out if g.activation != "none" or head_dim else 0) - (out if g.aux else 0)
    site = EpilogueSite(g.M, g.N, g.K, dtype, torch.device(device), "none" if producer else
                        ("ln" if g.kind == "consumer_ln" else "rms"), g.activation, g.aux,
                        g.kind[len("producer_"):] if producer else "none", producer, False, saved, head_dim=head_dim)
    assert cm.kind_of(site.row_norm, site.activation, site.stats, site.head_dim) == g.kind, g
    return site


def measurement(site, times: dict) -> Measurement:
    """A ``selection._measure_epilogue`` result as the fit's record (the activation named as the kernel ran it:
    ``cost_model.priced_activation``)."""
    import torch

    from .selection import priced_activation

    activation = priced_activation(site)
    return Measurement(site.M, site.K, site.N, cm.kind_of(site.row_norm, site.activation, site.stats, site.head_dim),
                       times["mm_ms"], float(site.saved_bytes), times["saved_ms"], times.get("triton_ms"),
                       times.get("quack_ms"), None if site.activation == "none" else activation,
                       site.write_aux, torch.empty((), dtype=site.dtype).element_size())


def hardware(device, gpu: str) -> tuple[dict, dict]:
    """``gpu``'s hardware data (``sms``, ``peak_flops``, ``hbm_bytes_per_ms``, ``l2_bytes``) and where each came
    from: the committed table, else the device's properties with the nominal peaks (``NOMINAL``), else rates
    measured here and divided by ``MEASURED_SHARE``."""
    import torch

    from .timing import graph_ms, sm_copy

    fields = ("sms", "peak_flops", "hbm_bytes_per_ms", "l2_bytes")
    if gpu in cm.CALIBRATION:
        return ({k: copy.deepcopy(cm.CALIBRATION[gpu][k]) for k in fields},
                {k: "committed table (cost_model.CALIBRATION)" for k in fields})
    props = torch.cuda.get_device_properties(device)
    hw = {"sms": props.multi_processor_count, "l2_bytes": float(props.L2_cache_size)}
    source = {"sms": "torch.cuda.get_device_properties", "l2_bytes": "torch.cuda.get_device_properties"}
    if gpu in NOMINAL:
        hw.update(copy.deepcopy(NOMINAL[gpu]))
        source.update(peak_flops="nominal (calibrate.NOMINAL)", hbm_bytes_per_ms="nominal (calibrate.NOMINAL)")
        return hw, source

    def gemm_rate(n=PEAK_GEMM):
        a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
        return 2.0 * n ** 3 / graph_ms(lambda: torch.mm(a, b))

    def copy_rate(nbytes=PEAK_COPY_BYTES):  # read nbytes / 2, write nbytes / 2
        src = torch.empty(nbytes // 4, device=device, dtype=torch.float16)
        dst = torch.empty_like(src)
        return nbytes / graph_ms(lambda: sm_copy(dst, src))

    rate = gemm_rate()
    peak = rate / MEASURED_SHARE["gemm"]
    hw["peak_flops"] = {1: 2 * peak, 2: peak, 4: peak / 2}
    source["peak_flops"] = (f"estimated: cuBLAS bf16 {PEAK_GEMM}x{PEAK_GEMM}x{PEAK_GEMM} ran {rate / 1e9:.1f} "
                            f"TFLOP/s, ÷ {MEASURED_SHARE['gemm']} (fp8: ×2, tf32: ÷2)")
    rate = copy_rate()
    hw["hbm_bytes_per_ms"] = rate / MEASURED_SHARE["copy"]
    source["hbm_bytes_per_ms"] = (f"estimated: a copy kernel over {PEAK_COPY_BYTES / 1e9:.1f} GB ran "
                                  f"{rate / 1e9:.2f} TB/s, ÷ {MEASURED_SHARE['copy']}")
    torch.cuda.empty_cache()
    return hw, source


def _format_ms(measured: Optional[float], model: Optional[float]) -> str:
    if measured is None:
        return "–"
    return f"{measured:.4f} / {model:.4f} ({model / measured - 1:+.1%})"


def table(cal: dict, records: Sequence[Measurement]) -> str:
    """Measured / fitted ms per site and component, and the fit's median |error|."""
    lines = ["| kind | M×K×N | saved MB | cuBLAS | copy | triton | quack |", "|---|---|---:|---|---|---|---|"]
    for r in records:
        p = predicted(cal, r)
        kind = r.kind + (f" {r.activation}" if r.activation else "") + (" +aux" if r.aux else "")
        lines.append(f"| {kind} | {r.M}×{r.K}×{r.N} | {r.saved_bytes / 1e6:.1f} | "
                     + " | ".join(_format_ms(m, p[f"{c}_ms"]) for c, m in (
                         ("mm", r.mm_ms), ("saved", r.saved_ms), ("triton", r.triton_ms), ("quack", r.quack_ms)))
                     + " |")
    errs = errors(cal, records)
    every = [e for v in errs.values() for e in v]
    per = ", ".join(f"{c} {statistics.median(v):.1%}" for c, v in errs.items() if v)
    lines += ["", f"median |fitted / measured − 1|: {statistics.median(every):.1%} ({per})" if every else ""]
    return "\n".join(lines)


def command(quick: bool = False, backends: Optional[Sequence[str]] = None, out: Optional[str] = None,
            cache_dir: Optional[str] = None) -> int:
    """``python -m norm_fusion_inductor calibrate``: measure the grid on this process's CUDA device, fit, print
    the table and write the calibration file (``out``, else in ``cache_dir``'s or the default cache folder)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("calibrate: no CUDA GPU here; it times the kernels on the GPU model it calibrates")
    if torch.cuda.get_device_capability()[0] < 9:
        raise SystemExit("calibrate: the regrouped epilogue GEMM needs sm_90 or newer (tensor descriptors)")
    try:
        import scipy.optimize  # noqa: F401  (before minutes of measuring)
    except ImportError:
        raise SystemExit("calibrate: the fit needs scipy: pip install scipy")
    import triton

    from . import selection
    from .kernels import quack_epilogue_gemm as qg

    device = torch.device("cuda", torch.cuda.current_device())
    gpu = torch.cuda.get_device_name(device)
    backends = tuple(backends or default_backends())
    grid = QUICK_SITES if quick else SITES
    path = out or cm.calibration_file(gpu, cache_dir)
    print(f"calibrating the cost model for {gpu}: {len(grid)} sites, backends {', '.join(backends)} -> {path}")
    hw, sources = hardware(device, gpu)
    records, reasons = [], {}
    start = time.perf_counter()
    for i, g in enumerate(grid, 1):
        site = epilogue_site(g, device)
        try:
            times = selection._measure_epilogue(site, selection.Screen(backends=backends, margin=0.0))
        except Exception as e:  # one site failing leaves the others to fit
            print(f"[{i}/{len(grid)}] {g}: measurement failed ({type(e).__name__}: {e})")
            continue
        finally:
            torch.cuda.empty_cache()
        r = measurement(site, times)
        records.append(r)
        for b in backends:
            if times.get(f"{b}_ms") is None and times.get(f"{b}_reason"):
                reasons.setdefault(b, set()).add(times[f"{b}_reason"])
        timed = ", ".join(f"{b} {getattr(r, b + '_ms'):.4f}" for b in backends if getattr(r, b + "_ms") is not None)
        name = g.kind + (f" {g.activation}" if g.activation != "none" else "") + (" +aux" if g.aux else "")
        print(f"[{i}/{len(grid)}] {name} {g.M}x{g.K}x{g.N}: cuBLAS {r.mm_ms:.4f}, copy {r.saved_ms:.4f}, "
              f"{timed or 'no backend ran'} ms ({time.perf_counter() - start:.0f} s)")
    if not any(r.triton_ms is not None or r.quack_ms is not None for r in records):
        raise SystemExit("calibrate: no epilogue GEMM ran: " + "; ".join(
            f"{b}: {', '.join(sorted(v))}" for b, v in reasons.items()))
    base = copy.deepcopy(cm.CALIBRATION.get(gpu) or cm.CALIBRATION[REFERENCE_GPU])
    base.update(copy.deepcopy(hw))
    cal = fit(records, base, fit_alu=True)
    for b in ("triton", "quack"):  # a backend without times: the committed constants, else none (not screened)
        if not any(_measured(r, b) is not None for r in records):
            if b in cm.CALIBRATION.get(gpu, {}):
                cal[b] = copy.deepcopy(cm.CALIBRATION[gpu][b])
            else:
                cal.pop(b, None)
    print()
    print(table(cal, records))
    for b, why in sorted(reasons.items()):
        print(f"{b} not timed at some sites: {'; '.join(sorted(why))}")
    errs = errors(cal, records)
    data = {"gpu": gpu, "calibration": cal, "hardware_sources": sources, "backends": list(backends),
            "grid": "quick" if quick else "full", "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "versions": {"torch": torch.__version__, "triton": triton.__version__, "quack": qg.version()},
            "median_abs_err": {c: statistics.median(v) for c, v in errs.items() if v},
            "sites": [dict(dataclasses.asdict(r), fitted=predicted(cal, r)) for r in records]}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
    print(f"\nwrote {path}" + ("" if out else f" (the cost model's constants for {gpu} from now on)"))
    return 0
