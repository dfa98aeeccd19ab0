"""Per-site choice between the fused kernel and the unfused path, made at compile time and cached.

With policy "auto" on CUDA the fused kernel (autotuned) is timed against a *lower bound* of the unfused path:
cuBLAS for the matmul (without its bias, which the unfused graph can add in a neighbouring pass) plus a device
copy of the norm's input (x [M, K] before a matmul, the matmul's output [M, N] after one: the bytes any norm
kernel must move). A norm kernel is never faster than that copy (measured on the H200: Inductor's RMSNorm runs
at 0.5–0.9× copy speed, see docs/benchmarks_journal.md), so a site the fused kernel wins here by ``min_speedup`` (for timing
noise) is won against Inductor too; the price is that some sites where fusing would have paid stay unfused.
Choices are cached in memory and on disk, keyed by GPU, versions, kernel source, the measurement's version and
shape (M by power-of-two bucket).

The copy is timed as an elementwise kernel (``timing.sm_copy``), not ``Tensor.copy_``: under CUDA-graph capture a
contiguous ``copy_`` becomes a memcpy node that runs on the copy engines, slower than a kernel on the SMs, so the
bound read high and a site was fused that ran slower than the default (docs/decisions.md#timingsm_copy).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import time
from typing import NamedTuple, Optional

import torch

from . import report
from .config import GEMM_BACKENDS, NormFusionConfig
from .kernels import epilogue_gemm, norm_attention, tuning
from .kernels.common import m_bucket
from .report import Implementation
from .sites import AttentionSite, EpilogueSite, PostNormSite, post_norm_operands
from .timing import graph_ms, host_ms, interleaved_medians, sm_copy


@dataclasses.dataclass(frozen=True)
class Choice:
    fused: bool
    implementation: Implementation
    reason: str
    plan: Optional[dict] = None  # the Triton block config measured fastest, for direct launch
    measured: bool = False  # decided by a measurement (not by the policy or the operands alone)


_MEMORY: dict = {}  # each cache file's measurements in memory, by the file's path (``_memory``)
# part of every cache key: a change to how the times are measured must not reuse times measured the old way
MEASUREMENT = "copy-kernel+mm-without-bias+attention-host+post-norm-on-epilogue-gemm"
# The post-norm's bound (cuBLAS + copies of the matmul's output) keeps the margin it was calibrated with: below
# it, sites it favoured ran slower fused (docs/decisions.md#selectionprologue_min_speedup). The regrouped
# rewrite's bound (cuBLAS + the bytes its epilogues save) uses min_speedup itself (1.05 by default).
POST_NORM_MIN_SPEEDUP = 1.1
# bytes per ms of a copy on the SMs (H200: ~4 TB/s), for a fold's cost where the site has no measured copy
PEAK_COPY_BYTES_PER_MS = 4.0e9
# the least GPU time of the fold's own kernel, however small the weight: a pointwise kernel over a 0.3 MB weight ran
# 1.65 us on the H200 (benchmarks/diagnostics/profile_pair.py), priced at 0.0000 ms by its bytes alone; on a 40 us
# pair that is the margin (docs/decisions.md#selectionfold_kernel_min_ms)
FOLD_KERNEL_MIN_MS = 0.0016
# the cache file's measurement keys left incomplete ({key: when}); with revisit_pending each keeps Inductor's FX
# graph cache missing (pending_token) until a compile completes it, or for PENDING_TTL_S at most (its site may be
# gone)
PENDING = "__pending__"
PENDING_TTL_S = 3600.0
# the budgets of the pass's current run over a graph and the seconds spent of each: Quack's JIT
# (NormFusionConfig.quack_jit_budget_s) and the Triton kernels' compiles and timings of the close calls
# (measure_budget_s); none outside a run (a direct call of the selection)
def _fresh_budget(limit_s: float = float("inf")) -> dict:
    """A budget of ``limit_s`` seconds with nothing spent (``last_s``: the last measurement's seconds)."""
    return {"budget_s": float(limit_s), "spent_s": 0.0, "last_s": 0.0}


_QUACK_JIT = _fresh_budget()
_TRITON_MEASURE = _fresh_budget()


@contextlib.contextmanager
def measurement_budgets(quack_jit_s: float, triton_s: float = float("inf")):
    """The budgets of one run of the pass over a graph (measurements outside any run, such as ``calibrate``'s,
    have none)."""
    _QUACK_JIT.update(_fresh_budget(quack_jit_s))
    _TRITON_MEASURE.update(_fresh_budget(triton_s))
    try:
        yield
    finally:
        _QUACK_JIT.update(_fresh_budget())
        _TRITON_MEASURE.update(_fresh_budget())


def _budget_spent(budget: dict, option: str) -> Optional[str]:
    """Why a measurement is left to a later compile, or None: this run's ``option`` budget is spent, or another
    measurement as long as the last one would overrun it (the budget bounds the compile, not only when the last
    measurement starts; the run's first measurement always starts)."""
    spent, last, limit = budget["spent_s"], budget["last_s"], budget["budget_s"]
    if spent < limit and spent + last <= limit:
        return None
    said = "is spent" if spent >= limit else f"would be overrun (the last measurement took {last:.1f} s)"
    return (f"not compiled in this compile: its budget ({option}={limit:g}) {said} ({spent:.1f} s spent); "
            f"timed when the pass runs again (the next compile with revisit_pending)")


@contextlib.contextmanager
def _spending(budget: dict):
    """Count the block's wall time to ``budget``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        budget["last_s"] = time.perf_counter() - start
        budget["spent_s"] += budget["last_s"]


def _live_pending(entries) -> dict:
    """The pending keys younger than PENDING_TTL_S ({key: when})."""
    now = time.time()
    return {k: t for k, t in (entries or {}).items() if now - t < PENDING_TTL_S} if isinstance(entries, dict) else {}


@functools.lru_cache(maxsize=None)
def _kernel_source_hash(module) -> str:
    return hashlib.sha256(pathlib.Path(module.__file__).read_bytes()).hexdigest()[:16]


def _cache_file(config: NormFusionConfig) -> pathlib.Path:
    return pathlib.Path(config.cache_root) / "choices.json"


def _memory(config: NormFusionConfig) -> dict:
    """The measurements of ``config``'s cache file held in memory: one dict per file, so that a process compiling
    with two cache folders neither serves one folder's measurements from the other nor writes them into it."""
    return _MEMORY.setdefault(str(_cache_file(config)), {})


def _key(site) -> str:
    import triton

    from . import measure_block  # the child process that times the compiled block

    if isinstance(site, AttentionSite):
        from . import attention_ops

        sources = "".join(_kernel_source_hash(m) for m in (norm_attention, attention_ops, measure_block))
        return "|".join(str(v) for v in (torch.cuda.get_device_name(site.device), torch.__version__,
                                          triton.__version__, sources, MEASUREMENT,
                                          type(site).__name__, *dataclasses.astuple(site)))

    name = torch.cuda.get_device_name(site.device) if site.device.type == "cuda" else site.device.type
    sources = "".join(_kernel_source_hash(m) for m in (epilogue_gemm, measure_block))
    return "|".join(str(v) for v in (name, torch.__version__, triton.__version__, sources, repr(tuning.current()),
                                      MEASUREMENT, m_bucket(site.M), *dataclasses.astuple(site)[1:]))


def choose(site: PostNormSite, config: NormFusionConfig) -> Choice:
    """Whether the post-norm site runs as one GEMM with the norm in its epilogue (policy auto: measured
    against the unfused lower bound, ``_measured_choice``)."""
    choice = _policy_choice(site, config, _static_reason(site) if site.device.type == "cuda" else None)
    if choice is not None and choice.implementation != Implementation.FUSED_TRITON:
        return choice
    if config.policy == "always":
        try:
            plan = _cached(site, config, "plan", _tune)["plan"]
        except Exception as e:  # no config tuned: the op tunes at run time
            return Choice(True, Implementation.FUSED_TRITON, f"policy=always (tuning failed: {type(e).__name__}: {e})")
        return Choice(True, Implementation.FUSED_TRITON, f"policy=always; config {_plan_name(plan)}", plan)
    return _measured_choice(site, config)


def _static_reason(site: PostNormSite) -> Optional[str]:
    """What the kernel cannot take whatever the tensors' layout (the op checks the tensors at run time)."""
    if site.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"dtype {site.dtype} not supported"
    if site.device.type == "cuda" and torch.cuda.get_device_capability(site.device)[0] < 9:
        return "tensor descriptors (TMA) need sm_90 or newer"
    elem = torch.empty((), dtype=site.dtype).element_size()
    if (site.K * elem) % 16 or (site.N * elem) % 16:
        return f"K={site.K} or N={site.N} rows are not 16-byte aligned (TMA)"
    return epilogue_gemm.post_norm_problem(site.M, site.N)


def _cached(site, config: NormFusionConfig, kind: str, measure) -> dict:
    """``measure(site)`` (GPU timings, a tuned config), once per site key: from memory, the disk cache, or measured
    now (and stored)."""
    key = _key(site) + ("" if kind == "times" else "|" + kind)
    return _disk_cached(key, config, lambda: measure(site))


def _disk_cached(key: str, config: NormFusionConfig, measure) -> dict:
    """``measure()`` once per key: from memory, the disk cache, or measured now (and stored). A measurement
    marked ``incomplete`` (a backend left out for this compile's budget) is not stored; its key is listed as
    pending (``pending_token``) until a later compile measures it whole."""
    memory = _memory(config)
    if key not in memory:
        try:
            memory.update(json.loads(_cache_file(config).read_text()))
        except (OSError, ValueError):
            pass
    if key not in memory:
        # the pass runs under Inductor's fake mode; the measurement needs real tensors
        with torch._subclasses.fake_tensor.unset_fake_temporarily(), report.clocked("measurement"):
            value = measure()
            if torch.cuda.is_initialized():  # the measurement's operands (GBs at the block shapes) go back to
                torch.cuda.empty_cache()  # the device, not to the caching allocator the model then runs in
        try:  # what other processes stored meanwhile (a child process's tuned config, _compiled_check) is kept
            memory.update(json.loads(_cache_file(config).read_text()))
        except (OSError, ValueError):
            pass
        pending = _live_pending(memory.get(PENDING))
        pending.pop(key, None)
        if not value.get("incomplete"):
            memory[key] = value
        else:
            pending[key] = time.time()
        if pending:
            memory[PENDING] = pending
        else:
            memory.pop(PENDING, None)
        try:
            path = _cache_file(config)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(memory, indent=0))
            tmp.replace(path)
        except OSError:
            pass  # a read-only home only costs a re-measurement next time
        if value.get("incomplete"):
            return value
    return memory[key]


def pending_token(config: NormFusionConfig) -> str:
    """A digest of the measurements left incomplete in this cache folder ("" when none), part of the pass's
    ``uuid()`` where the config asks to ``revisit_pending``: while one is pending, Inductor's FX graph cache
    misses, so the pass runs again and completes it (a graph served from that cache keeps the choice made
    without it)."""
    try:
        pending = _live_pending(json.loads(_cache_file(config).read_text()).get(PENDING))
    except (OSError, ValueError, AttributeError):
        return ""
    return hashlib.sha256("\n".join(sorted(pending)).encode()).hexdigest()[:12] if pending else ""


def _measured_choice(site: PostNormSite, config: NormFusionConfig) -> Choice:
    try:
        t = _cached(site, config, "times", _within_budget(_measure))
    except Exception as e:  # never let a failed measurement break the compile: keep the unfused path
        return Choice(False, Implementation.UNFUSED, f"measurement failed ({type(e).__name__}: {e})")
    if t.get("incomplete"):
        return Choice(False, Implementation.UNFUSED, t["reason"])
    if t.get("plan") is not None:  # what policy "always" (a compiled_check child) asks for: not tuned again there
        _cached(site, config, "plan", lambda site: {"plan": t["plan"]})
    # the norm kernel's bytes: its input read and output written (a copy), plus each residual read
    copies = 1 + 0.5 * (site.has_residual + site.has_residual_out)
    norm_ms = t["copy_ms"] * copies
    fused_ms, plan = t["fused_ms"], t.get("plan")
    unfused_ms = t["mm_ms"] + norm_ms
    copied = "the matmul's output" + (f" x {copies} (residuals)" if copies > 1 else "")
    detail = (f"measured fused {fused_ms:.4f} ms vs unfused lower bound {unfused_ms:.4f} ms "
              f"(cuBLAS {t['mm_ms']:.4f} + copy of {copied} {norm_ms:.4f}) at M={site.M}")
    if fused_ms * max(config.min_speedup, POST_NORM_MIN_SPEEDUP) >= unfused_ms:
        if config.compiled_check and fused_ms < unfused_ms:  # the real unfused graph decides
            return _compiled_check(site, config, detail)
        return Choice(False, Implementation.UNFUSED, detail)
    if config.launch == "op" and fused_ms < config.min_kernel_ms and not torch._inductor.config.triton.cudagraphs:
        return Choice(False, Implementation.UNFUSED, f"{detail}; but the kernel is shorter than min_kernel_ms="
                                                     f"{config.min_kernel_ms} and the op's host cost would dominate")
    return Choice(True, Implementation.FUSED_TRITON, f"{detail}; config {_plan_name(plan)}", plan)


def _within_budget(measure):
    """``measure(site)`` counted against the run's Triton measurement budget (``measure_budget_s``); once the
    budget is spent, an incomplete result that says so instead (kept pending: a later compile measures it)."""
    def measure_within_budget(site):
        spent = _budget_spent(_TRITON_MEASURE, "measure_budget_s")
        if spent is not None:
            return {"incomplete": True, "reason": spent}
        with _spending(_TRITON_MEASURE):
            return measure(site)

    return measure_within_budget


def _compiled_check(site: PostNormSite, config: NormFusionConfig, before: str) -> Choice:
    """A site whose fused kernel beats the unfused lower bound by less than min_speedup (NormFusionConfig
    .compiled_check): its subgraph compiled by torch.compile and by this plugin with policy "always", timed side
    by side in a child process (measure_block.measure_matmul); fused, with the config policy "always" takes, if
    that graph wins by compiled_min_speedup. Timed alone the subgraph misses what Inductor fuses across its
    edges in a real model (a residual add into the norm), which the margin is for."""
    kind = "compiled-max-autotune" if torch._inductor.config.max_autotune else "compiled"  # what it compiles
    try:
        t = _cached(site, config, kind, lambda site: _measure_compiled_block(site, config))
        plan = _cached(site, config, "plan", _tune)["plan"]  # the child tuned it (disk cache)
    except Exception as e:  # keep the unfused path
        return Choice(False, Implementation.UNFUSED,
                      f"{before}; the compiled graphs not measured ({type(e).__name__}: {e})")
    detail = (f"{before}; then compiled: fused {t['fused_ms']:.4f} ms vs {t['compiled_ms']:.4f} ms for "
              f"torch.compile's graph")
    if t["fused_ms"] * config.compiled_min_speedup < t["compiled_ms"]:
        return Choice(True, Implementation.FUSED_TRITON, f"{detail}; config {_plan_name(plan)}", plan)
    return Choice(False, Implementation.UNFUSED, detail)


def _plan_name(plan: Optional[dict]) -> str:
    """"128x256x64", for the site's reason: the block config that runs it."""
    return f"{plan['BLOCK_M']}x{plan['BLOCK_N']}x{plan['BLOCK_K']}" if plan else "tuned at run time"


def _post_norm_gemm(site: PostNormSite, t: dict, config: Optional[dict] = None):
    """The fused kernel on the operands ``t`` (sites.post_norm_operands), tuned once per shape unless ``config``."""
    return epilogue_gemm.post_norm_gemm(t["x"], t["w"], t["b"], t["residual"], t["g"], t["beta"], 1e-6,
                                        layer_norm=site.norm == "ln", write_z=site.write_z, w_kn=site.weight_kn,
                                        residual_after=t["residual_out"], config=config)


def _tune(site: PostNormSite, inputs: Optional[dict] = None) -> dict:
    """{"plan": the fastest block config of the fused kernel for this site, by GPU time}."""
    t = inputs or post_norm_operands(site)
    _post_norm_gemm(site, t)
    epilogue = epilogue_gemm.post_norm_epilogue(site.norm == "ln", site.has_bias, site.has_residual, site.write_z,
                                                site.has_residual_out)
    return {"plan": epilogue_gemm.tuned_for(site.M, site.N, site.K, site.dtype, site.weight_kn, epilogue)}


def _measure(site: PostNormSite) -> dict:
    """Median GPU times of the fused kernel (its tuned config) and of the unfused lower bound, interleaved over
    three rounds, and that config.

    Timed by CUDA-graph replay: the pass runs inside Inductor's compile, where the Python dispatcher makes every
    eager call slow (measured: small fused launches looked 2.5x slower than they run), and graph replay takes
    the host out of both sides alike."""
    t = post_norm_operands(site)
    plan = _tune(site, t)["plan"]
    w_mm = t["w"] if site.weight_kn else t["w"].t()
    # without the bias: cuBLAS's bias epilogue is slower than the plain GEMM, and Inductor adds the bias in the
    # norm's pass instead; with it the bound read high and a post-norm site was fused that ran slower than the
    # default (docs/decisions.md#selection_measure)
    mm = lambda: torch.mm(t["x"], w_mm)  # noqa: E731
    copied = mm()  # the norm's input
    y = torch.empty_like(copied)
    times = interleaved_medians({"fused_ms": lambda: _post_norm_gemm(site, t, plan), "mm_ms": mm,
                                 "copy_ms": lambda: sm_copy(y, copied)}, 3, graph_ms)
    return {**times, "plan": plan}


# --- norm → attention → norm ------------------------------------------------------------------------------------

def choose_attention(site: AttentionSite, config: NormFusionConfig) -> Choice:
    """As ``choose``, for the norm → attention → norm block. Inference: the fused forward against a lower bound of
    the unfused block, the attention alone (SDPA, or the two batched matmuls of the generalized form without its
    activation) plus 2.5 copies of q for the norms' bytes (the LayerNorm reads q and writes q̂; the RMSNorm reads
    x and q, writes out), all timed as CUDA-graph replays; the fused op counts GPU + host time per call unless
    the graph runs under CUDA graphs (it launches its kernels from Python). Where the fused op does not beat that
    bound, and for every training site, the block compiled by torch.compile is timed against the fused op in a
    child process (``measure_block``), with ``compiled_min_speedup`` (the block timed alone misses its
    neighbours' fusion). In training the bound's attention term runs eager autograd and bounds nothing
    (docs/decisions.md#selectionchoose_attention)."""
    kernel_reason = _attention_kernel_reason(site)
    if site.train:
        choice = _policy_choice(site, config, kernel_reason)
        if choice is not None:
            return choice
        before = "forward + backward:"
    else:
        choice = _choose_attention_site(site, config, kernel_reason, _measure_attention, 2.5, "attention",
                                        "copies of q")
        if choice.fused or not choice.measured:  # fused, or never measured (policy, operands)
            return choice
        before = f"{choice.reason}; then"
    return _versus_compiled_block(site, config, before)


def _versus_compiled_block(site, config: NormFusionConfig, before: str) -> Choice:
    """The fused op against the unfused block compiled by torch.compile, timed side by side in a child process
    (``measure_block``), with ``compiled_min_speedup``; a failed measurement keeps the unfused path."""
    try:
        kind = "compiled-max-autotune" if torch._inductor.config.max_autotune else "compiled"  # what it compiles
        t = _cached(site, config, kind, _measure_compiled_block)
    except Exception as e:  # keep the unfused path
        return Choice(False, Implementation.UNFUSED,
                      f"{before} the compiled block not measured ({type(e).__name__}: {e})")
    detail = (f"{before} measured fused {t['fused_ms']:.4f} ms vs {t['compiled_ms']:.4f} ms for the compiled "
              f"block (torch.compile)")
    if t["fused_ms"] * config.compiled_min_speedup < t["compiled_ms"]:
        return Choice(True, Implementation.FUSED_TRITON, detail)
    return Choice(False, Implementation.UNFUSED, detail)


# Compiling the block takes 10-30 s on the H200 machine; a child that fails or times out is not retried by this
# process (_FAILED), so a broken environment costs one timeout per site, not one per compilation.
MEASURE_BLOCK_TIMEOUT_S = 180
_FAILED: dict = {}


def _attention_kernel_reason(site: AttentionSite) -> Optional[str]:
    width = site.heads * site.head_dim
    if site.device.type != "cuda":
        return None  # _choose_attention_site gives the device's reason
    fake_q = torch.empty(0, width, dtype=site.dtype, device=site.device)  # shapes and device only
    fake_kv = torch.empty(0, site.kv_len, width, dtype=site.dtype, device=site.device)
    return norm_attention.unsupported_reason(fake_q, fake_kv, fake_kv, site.heads, site.activation)


def _measure_compiled_block(site, config: Optional[NormFusionConfig] = None) -> dict:
    """``measure_block`` in a child process (Dynamo cannot compile inside the compilation that asks), for an
    AttentionSite or a PostNormSite; the child sees this process's import path (relative entries made absolute),
    TF32 setting and (matmul sites) the choice cache and launch of ``config``, and runs in a neutral directory so
    that ``-m`` does not import another checkout from the working directory."""
    import subprocess
    import sys
    import tempfile

    key = _key(site)
    if key in _FAILED:
        raise RuntimeError(f"{_FAILED[key]} (earlier in this process; not retried)")
    fields = {k: str(v) if isinstance(v, (torch.dtype, torch.device)) else v
              for k, v in dataclasses.asdict(site).items()}
    fields["kind"] = "matmul" if isinstance(site, PostNormSite) else "attention"
    if config is not None:
        fields["cache_dir"] = None if config.cache_dir is None else os.fspath(config.cache_dir)
        fields["launch"] = config.launch
    fields["allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    fields["max_autotune"] = bool(torch._inductor.config.max_autotune)  # the asking compilation's mode
    paths = [os.path.abspath(p or ".") for p in sys.path if isinstance(p, str)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    env.pop("TRITON_INTERPRET", None)
    try:
        with report.clocked("child process"):
            done = subprocess.run([sys.executable, "-m", "norm_fusion_inductor.measure_block", json.dumps(fields)],
                                  capture_output=True, text=True, timeout=MEASURE_BLOCK_TIMEOUT_S, env=env,
                                  cwd=tempfile.gettempdir())
        if done.returncode != 0:
            raise RuntimeError(f"child process failed: {done.stderr.strip().splitlines()[-1:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    except Exception as e:
        _FAILED[key] = f"{type(e).__name__}: {e}"
        raise


# The attention sites' bound keeps a larger margin than min_speedup (recalibrated to 1.1 on the matmul sites only)
# until it is recalibrated on the GPU; the sites it leaves unfused are measured against the compiled block
# (choose_attention), with compiled_min_speedup.
ATTENTION_MIN_SPEEDUP = 1.25


def _policy_choice(site, config: NormFusionConfig, kernel_reason: Optional[str]) -> Optional[Choice]:
    """The choice the policy, the device or the operands make without a measurement, or None (a post-norm or
    attention site; ``kernel_reason``: why the kernel cannot run it)."""
    if config.policy == "never":
        return Choice(False, Implementation.UNFUSED, "policy=never")
    reason = f"no fused kernel for device '{site.device.type}'" if site.device.type != "cuda" else kernel_reason
    if reason is not None:
        if config.policy == "always":
            return Choice(True, Implementation.REFERENCE,
                          f"policy=always, kernel cannot run it ({reason}): reference op")
        return Choice(False, Implementation.UNFUSED, reason)
    if config.policy == "always":
        return Choice(True, Implementation.FUSED_TRITON, "policy=always")
    return None


def _choose_attention_site(site, config: NormFusionConfig, kernel_reason: Optional[str], measure, copies: float,
                           attention: str, copied: str) -> Choice:
    """The policy, then the measurement: fused (``measure``'s fused_ms) against the unfused lower bound
    attention_ms + ``copies`` × copy_ms, times min_speedup (at least ATTENTION_MIN_SPEEDUP)."""
    choice = _policy_choice(site, config, kernel_reason)
    if choice is not None:
        return choice
    try:
        t = _cached(site, config, "times", measure)
    except Exception as e:  # never let a failed measurement break the compile: keep the unfused path
        return Choice(False, Implementation.UNFUSED, f"measurement failed ({type(e).__name__}: {e})")
    unfused_ms = t["attention_ms"] + copies * t["copy_ms"]
    fused_ms, host_note = t["fused_ms"], ""
    # the op launches its kernels from Python; CUDA-graph replays (the timing) hide that, a graph run without
    # them does not (its host time can exceed its kernels' time): priced at GPU + host time, as every op call;
    # see docs/decisions.md#selection_choose_attention_site
    if t.get("host_ms") and not torch._inductor.config.triton.cudagraphs:
        fused_ms = t["fused_ms"] + t["host_ms"]
        host_note = f" (GPU {t['fused_ms']:.4f} + host time per call {t['host_ms']:.4f} ms)"
    what = "forward + backward" if site.train else "forward"
    detail = (f"{what}: measured fused {fused_ms:.4f} ms{host_note} vs unfused lower bound {unfused_ms:.4f} ms "
              f"({attention} {t['attention_ms']:.4f} + {copies} {copied} {copies * t['copy_ms']:.4f})")
    if fused_ms * max(config.min_speedup, ATTENTION_MIN_SPEEDUP) >= unfused_ms:
        return Choice(False, Implementation.UNFUSED, detail, measured=True)
    return Choice(True, Implementation.FUSED_TRITON, detail, measured=True)


def _measure_attention(site: AttentionSite) -> dict:
    """Forward times of the fused op, the unfused attention alone and a copy of q (inference sites)."""
    from . import attention_ops

    dev, dt = site.device, site.dtype
    B, L, Lk, H, D = site.shape
    q = torch.randn(B * L, H * D, device=dev, dtype=dt)
    k, v = (torch.randn(B, Lk, H * D, device=dev, dtype=dt) for _ in range(2))
    weights = [(1 + 0.1 * torch.randn(H * D, device=dev)).to(dt) if present else None
               for present in (site.has_ln_weight, site.has_ln_bias, site.has_rms_weight)]
    offsets = torch.arange(0, (B + 1) * L, L, device=dev, dtype=torch.int32)
    scale = D ** -0.5 if site.activation == "softmax" else 1.0 / Lk
    qh = q.view(B, L, H, D).transpose(1, 2)
    kh, vh = (t.view(B, Lk, H, D).transpose(1, 2) for t in (k, v))

    def fused():
        return attention_ops.norm_attention(q, k, v, offsets, L, H, *weights, scale, site.activation, 1e-5,
                                            1e-6)[0]

    def attention():
        if site.activation == "softmax":
            return torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, scale=scale)
        return torch.matmul(torch.matmul(qh, kh.transpose(-2, -1)), vh)

    y = torch.empty_like(q)
    times = _time_interleaved({"fused_ms": fused, "attention_ms": attention, "copy_ms": lambda: sm_copy(y, q)}, False)
    return {**times, "host_ms": host_ms(fused)}


def _time_interleaved(fns: dict, train: bool) -> dict:
    """Median times of three interleaved rounds: CUDA-graph replays, or for training plain do_bench (autograd
    runs the backward on its own device thread, which a CUDA-graph capture does not see), every side alike."""
    from triton.testing import do_bench

    time_one = (lambda fn: do_bench(fn, rep=30, return_mode="median")) if train else graph_ms
    return interleaved_medians(fns, 3, time_one)


# --- regrouped normalization: one epilogue GEMM against the GEMM and the round trips it removes --------------------

def choose_epilogue_gemm(M, N, K, dtype, device, *, row_norm, activation, write_aux, stats, residual, w_kn,
                         norm_bytes, config: NormFusionConfig, residual_norm: str = "none",
                         fold_bytes: int = 0, head_dim: int = 0, rope: bool = False, head_norm: bool = True,
                         rope_interleaved: bool = False, rope_dim: int = 0, head_gates: bool = False,
                         head_center: bool = False, direct_launch: bool = False, backward_reads_norm: bool = False,
                         activation_written: bool = True) -> Choice:
    """Whether to run this GEMM of a regrouped chain on the epilogue kernel.

    With policy "auto" on CUDA the kernel (autotuned) is timed against a lower bound of what it replaces: cuBLAS
    for the same product plus a copy kernel moving the bytes its epilogue saves (``EpilogueSite.saved_bytes``).
    The unfused graph cannot move fewer bytes than that, so a GEMM that wins here by ``min_speedup`` wins against
    Inductor too. ``fold_bytes``: the weight-side passes the fused path adds per call (γ folded into the weight
    in training), charged at the copy's measured rate; without CUDA graphs a GEMM that runs as an op (Quack, or
    Triton not launched directly) is priced at its GPU time plus its measured host time per call; the margin
    pays for the timing's noise. A GEMM shorter than ``min_kernel_ms`` that runs through the op is left unfused
    (its Python call per step would show, unless CUDA graphs replay it); with ``direct_launch`` (the pass can trace the launch into
    its graph: launch="direct", static shapes) the Triton kernel has no such cost, Inductor launches it, and it
    is taken where it passes the margin (the choice's ``plan`` is then its tuned block config).
    ``activation_written``: the unfused graph writes the activation's output (not where Inductor computes it inside
    the kernels that read it, a GELU read only by a LayerNorm: no round trip to save). Without the
    margin and the fold's cost, transformer-layer sites won their bounds narrowly and the layers ran slower
    (docs/decisions.md#selectionchoose_epilogue_gemm)."""
    from .kernels import epilogue_gemm as eg

    elem = torch.empty((), dtype=dtype).element_size()
    out_bytes = M * N * elem
    if backward_reads_norm:  # training: the weight gradient reads the normalized tensor, so it is still written
        norm_bytes = 0  # (recomputed in the backward from x and rstd, or saved): moved, not saved
    if row_norm != "none":  # a consumer: the normalized tensor's write (its share), and the activation's trip
        # (or the per-head norm's and RoPE's: one pass reading and writing the output)
        # (none where Inductor computes the activation inside the kernels reading it: ``activation_written``)
        trip = (activation != "none" and activation_written) or head_dim
        # (with output gates between the heads only the q half makes the trip: the gates are read as written)
        trip_bytes = (out_bytes if head_gates else 2 * out_bytes) if trip else 0
        saved = norm_bytes + trip_bytes - (out_bytes if write_aux else 0)
    else:  # the producer: the GEMM output's write and read by the residual add, and, where the residual is the
        # previous norm's output read normalized on load, that output's write (its last reader gone; its read
        # becomes one of the norm's input, the same bytes)
        saved = 2 * out_bytes + (out_bytes if residual_norm != "none" and not backward_reads_norm else 0)
    site = EpilogueSite(M, N, K, dtype, device, row_norm, activation, write_aux, stats, residual, w_kn, saved,
                        residual_norm, head_dim, rope, head_norm, fold_bytes, rope_interleaved, rope_dim, head_gates,
                        head_center)
    if config.policy == "never":
        return Choice(False, Implementation.UNFUSED, "policy=never")
    misaligned = (K * elem) % 16 or (N * elem) % 16
    if device.type != "cuda":
        if eg.interpret_mode() and dtype == torch.bfloat16:  # eg.unsupported_reason: the op runs its reference
            return Choice(True, Implementation.REFERENCE, "Triton interpreter (bf16: the op's torch reference)")
        if eg.interpret_mode() and misaligned:  # the kernel would not take it: the op would run its reference
            return Choice(False, Implementation.UNFUSED, f"K={K} or N={N} rows are not 16-byte aligned (TMA)")
        if eg.interpret_mode():
            return Choice(True, Implementation.REGROUPED_TRITON, "Triton interpreter")
        if config.policy == "always":
            return Choice(True, Implementation.REFERENCE, "policy=always (no kernel on this device: torch reference)")
        return Choice(False, Implementation.UNFUSED, f"no fused kernel for device '{device.type}'")
    if torch.cuda.get_device_capability(device)[0] < 9:
        return Choice(False, Implementation.UNFUSED, "tensor descriptors (TMA) need sm_90 or newer")
    if misaligned:
        return Choice(False, Implementation.UNFUSED, f"K={K} or N={N} rows are not 16-byte aligned (TMA)")
    if config.policy == "always":
        if "triton" not in config.gemm_backends:
            return Choice(True, Implementation.REGROUPED_QUACK, "policy=always")
        return Choice(True, Implementation.REGROUPED_TRITON, "policy=always")
    try:
        t = _cached_epilogue(site, config, direct_launch)
    except Exception as e:  # a failed measurement never breaks the compile: keep the unfused path
        return Choice(False, Implementation.UNFUSED, f"measurement failed ({type(e).__name__}: {e})")
    bound = t["mm_ms"] + t["saved_ms"]
    fold_ms = _fold_ms(fold_bytes, t["saved_ms"], saved)
    if t.get("decided_by_model"):
        return _pays_its_host(_model_choice(site, t, fold_ms, config), bound - t["predicted"]["triton"] - fold_ms,
                              config)
    timed = {name: t[f"{name}_ms"] for name in config.gemm_backends if t.get(f"{name}_ms") is not None}
    if not timed:
        return Choice(False, Implementation.UNFUSED, "no GEMM backend ran: " + "; ".join(
            f"{name}: {t.get(name + '_reason')}" for name in config.gemm_backends))
    timed = {name: ms + fold_ms for name, ms in timed.items()}
    triton_config = t.get("triton_config") if direct_launch else None
    # Without CUDA graphs an op call's host time is the step's unless the GPU hides it, and where several ops run
    # per step it does not: the recsys towers ran 0.83x with two Quack consumers whose kernels summed to 0.8x of
    # default's GPU time (host 1.93 vs 0.56 ms per step). So an op-launched GEMM is priced at GPU + host time per
    # call; the Triton kernel Inductor launches itself pays no such cost.
    priced = dict(timed)
    if not torch._inductor.config.triton.cudagraphs:
        for name in priced:
            if not (name == "triton" and triton_config is not None):
                priced[name] += t.get(f"{name}_host_ms") or 0.0
    backend = min(priced, key=priced.get)
    detail = (f"epilogue GEMM on {backend} {timed[backend]:.4f} ms vs unfused lower bound {bound:.4f} ms (cuBLAS "
              f"{t['mm_ms']:.4f} + {saved / 1e6:.1f} MB saved {t['saved_ms']:.4f}) at {M}x{K}x{N}")
    if fold_ms:
        detail += f" (including the weight fold per call, {fold_bytes / 1e6:.1f} MB: {fold_ms:.4f} ms)"
    if backward_reads_norm:
        detail += " (the normalized tensor's write not counted as saved: the backward reads it)"
    hosts = [f"{name} {t[name + '_host_ms']:.4f}" for name in timed if t.get(name + "_host_ms") is not None]
    if hosts:
        detail += f" (host time per op call: {', '.join(hosts)} ms)"
    others = [f"{name} {ms:.4f} ms" for name, ms in timed.items() if name != backend]
    others += [f"{name} not offered ({t[name + '_reason']})" for name in config.gemm_backends
               if name not in timed and t.get(name + "_reason")]
    if others:
        detail += " (" + "; ".join(others) + ")"
    if t.get("quack_probe_only"):
        detail += " (Quack timed with its probe config alone: the shortlist could not have made it win)"
    if t.get("quack_probe_budget"):
        detail += (" (Quack timed with its probe config alone: this compile's Quack JIT budget is spent; a later "
                   "compile tunes its shortlist)")
    if t.get("predicted"):
        detail += " (cost model: " + ", ".join(f"{name} {ms:.4f}" for name, ms in t["predicted"].items()) + " ms)"
    if priced[backend] != timed[backend]:
        detail += f" (priced with its op call's host time: {priced[backend]:.4f} ms)"
    if priced[backend] * config.min_speedup >= bound:
        return Choice(False, Implementation.UNFUSED, detail + f" (needs {config.min_speedup}x)")
    if triton_config is not None and "triton" in timed and timed["triton"] * config.min_speedup < bound:
        if backend == "triton" or timed[backend] < config.min_kernel_ms:
            # launched by Inductor's code: no op call per step (the faster op-launched backend would be host-bound)
            note = "" if backend == "triton" else f" (not {backend}: shorter than min_kernel_ms through the op)"
            return _pays_its_host(Choice(True, Implementation.REGROUPED_TRITON, f"{detail}; launched directly{note}",
                                         dict(triton_config)), bound - timed["triton"], config)
    if timed[backend] < config.min_kernel_ms and not torch._inductor.config.triton.cudagraphs:
        # the op is a Python call per GEMM: timed under a CUDA graph its host cost does not show
        why_op = ("no tuned Triton config to launch directly" if direct_launch and triton_config is None
                  else "not launched directly (launch='op', or a shape the traced launch does not serve)"
                  if not direct_launch else "")
        return Choice(False, Implementation.UNFUSED, f"{detail}; but the kernel is shorter than min_kernel_ms="
                                                     f"{config.min_kernel_ms} and the op's host cost would dominate"
                                                     + (f" ({why_op})" if why_op else ""))
    return Choice(True, Implementation(f"regrouped_{backend}"), detail)


def _pays_its_host(choice: Choice, saving_ms: float, config: NormFusionConfig) -> Choice:
    """A directly launched choice, unfused where it saves less GPU time per call than ``min_direct_saving_ms``
    (the host time its launches add to the step, which a host-bound block pays), unless CUDA graphs replay the
    step."""
    if saving_ms >= config.min_direct_saving_ms or torch._inductor.config.triton.cudagraphs:
        return choice
    return Choice(False, Implementation.UNFUSED, f"{choice.reason}; but it saves {saving_ms:.4f} ms per call, under "
                                                 f"min_direct_saving_ms={config.min_direct_saving_ms}: the launches "
                                                 "it adds would cost a host-bound step more")


def _fold_ms(fold_bytes: int, saved_ms: float, saved_bytes: int) -> float:
    """The weight fold's GPU time per call: its bytes at the measured copy's rate, at least the kernel's floor."""
    if not fold_bytes:
        return 0.0
    ms = fold_bytes * saved_ms / saved_bytes if saved_bytes > 0 else fold_bytes / PEAK_COPY_BYTES_PER_MS
    return max(ms, FOLD_KERNEL_MIN_MS)


def _model_choice(site: EpilogueSite, t: dict, fold_ms: float, config: NormFusionConfig) -> Choice:
    """A clear win decided by the cost model (``_decided_by_model``): the Triton kernel launched directly with
    its default config, never compiled in the pass (Inductor compiles it with the graph's own kernels)."""
    bound = t["mm_ms"] + t["saved_ms"]
    predicted = t["predicted"]["triton"] + fold_ms
    detail = (f"epilogue GEMM on triton, predicted {predicted:.4f} ms by the cost model, vs unfused lower bound "
              f"{bound:.4f} ms (cuBLAS {t['mm_ms']:.4f} + {site.saved_bytes / 1e6:.1f} MB saved {t['saved_ms']:.4f}) "
              f"at {site.M}x{site.K}x{site.N}")
    if fold_ms:
        detail += f" (including the weight fold per call, {site.fold_bytes / 1e6:.1f} MB: {fold_ms:.4f} ms)"
    detail += (f": a clear win (by min_speedup {config.min_speedup:g} with model_win_margin "
               f"{config.model_win_margin:g} to spare), decided without compiling it; launched directly, config "
               f"{_plan_name(t['triton_config'])}")
    return Choice(True, Implementation.REGROUPED_TRITON, detail, dict(t["triton_config"]))


class Screen(NamedTuple):
    """What the measurement of one regrouped GEMM may leave out (part of its cache key).

    ``backends``: the GEMM backends asked for (``gemm_backends``). ``op_floor_ms``: an op call is chosen only
    where it runs min_kernel_ms or longer (without CUDA graphs) and beats the bound by min_speedup, so under
    min_kernel_ms × min_speedup of bound Quack (an op) cannot win and is not compiled. ``margin`` (the config's
    ``model_margin``; 0: off): a backend the cost model predicts to miss the bound by this factor beyond
    ``min_speedup`` is not compiled either. ``host_priced``: without CUDA graphs an op call's host time is part
    of its price (``choose_epilogue_gemm``). ``direct_launch``: the pass can launch the Triton kernel from
    Inductor's code, so Triton's price has no host time (Quack, an op call, must beat its GPU time).
    ``win_margin`` (``model_win_margin``, 0 where ``model_margin`` is): a Triton GEMM predicted to beat the bound
    by this factor beyond ``min_speedup`` is a clear win, taken untimed (``_decided_by_model``)."""

    backends: tuple = GEMM_BACKENDS
    min_speedup: float = 1.05
    margin: float = 0.0
    op_floor_ms: float = 0.0
    host_priced: bool = True
    direct_launch: bool = False
    win_margin: float = 0.0


# Quack's op call costs the host about as much as the Triton op call at the same site: before Quack is compiled
# its host time is taken as this share of Triton's measured one; see
# docs/decisions.md#selectionquack_host_per_triton_host
QUACK_HOST_PER_TRITON_HOST = 0.7


def _screen(config: NormFusionConfig, direct_launch: bool) -> Screen:
    cudagraphs = bool(torch._inductor.config.triton.cudagraphs)
    return Screen(tuple(config.gemm_backends), float(config.min_speedup), float(config.model_margin),
                  0.0 if cudagraphs else config.min_kernel_ms * config.min_speedup, not cudagraphs,
                  bool(direct_launch), float(config.model_win_margin) if config.model_margin else 0.0)


def _cached_epilogue(site: EpilogueSite, config: NormFusionConfig, direct_launch: bool = False) -> dict:
    import triton

    from . import cost_model
    from .kernels import epilogue_gemm as eg
    from .kernels import quack_epilogue_gemm as qg

    quack = qg.version()  # the installed version, without importing Quack (seconds: it registers its own ops)
    screen = _screen(config, direct_launch)
    gpu = torch.cuda.get_device_name(site.device)
    # the cost model's constants decide what the screen leaves out: a new calibration file measures again
    calibration = cost_model.calibration_hash(gpu, config.cache_root)
    key = "|".join(str(v) for v in (gpu, torch.__version__, triton.__version__,
                                      _kernel_source_hash(eg), repr(tuning.current()), quack,
                                      _kernel_source_hash(qg), "epilogue", calibration,
                                      eg.m_bucket(site.M), *dataclasses.astuple(site)[1:], *screen))
    times = _disk_cached(key, config, lambda: _measure_epilogue(site, screen, config.cache_root))
    if times.get("quack_config"):  # measured in an earlier process: the op runs that config, not a new tuning
        qg.remember(site.M, site.N, site.K, site.dtype, site.w_kn, _site_epilogue(site), times["quack_config"])
    return times


def _predicted(site: EpilogueSite, cache_root: Optional[str] = None) -> dict:
    """The cost model's GPU ms of each backend's epilogue GEMM at this site ({} where the GPU model has no
    calibration, measured in ``cache_root``'s calibration folder or committed (``cost_model.calibration``), or
    the epilogue no kind)."""
    from . import cost_model

    kind = cost_model.kind_of(site.row_norm, site.activation, site.stats, site.head_dim)
    elem = torch.empty((), dtype=site.dtype).element_size()
    p = cost_model.predict(site.M, site.N, site.K, elem, kind, site.saved_bytes,
                           torch.cuda.get_device_name(site.device), aux=site.write_aux,
                           activation=priced_activation(site), cache_root=cache_root) if kind else None
    return {} if p is None else {b: p[f"{b}_ms"] for b in ("triton", "quack") if p[f"{b}_ms"] is not None}


def priced_activation(site: EpilogueSite) -> str:
    """The site's activation named as the Triton kernel runs it (``cost_model.priced_activation``: the one-MUFU
    forms for bf16 outputs where the kernel tuning asks for them)."""
    from . import cost_model
    from .kernels import epilogue_gemm as eg

    return cost_model.priced_activation(site.activation, eg.fast_sigmoid(site.dtype, site.device))


def _screened(backend: str, predicted: dict, bound: float, screen: Screen, host_ms: float = 0.0,
              rival_ms: Optional[float] = None) -> Optional[str]:
    """Why ``backend`` is not compiled: the cost model's GPU time, shortened by ``screen.margin``, plus the
    op call's ``host_ms``, misses the bound by min_speedup or does not beat ``rival_ms`` (the other backend's
    measured price); None: compile and time it."""
    if not screen.margin or backend not in predicted:
        return None
    best = predicted[backend] / screen.margin + host_ms
    host = f" + host {host_ms:.4f}" if host_ms else ""
    said = (f"not compiled: the cost model predicts {predicted[backend]:.4f} ms{host}, at best "
            f"{best:.4f} ms (÷ model_margin {screen.margin:g})")
    if best * screen.min_speedup >= bound:
        return f"{said}, which misses the unfused bound {bound:.4f} ms by min_speedup {screen.min_speedup:g}"
    if rival_ms is not None and best >= rival_ms:
        return f"{said}, not under the other backend's measured {rival_ms:.4f} ms"
    return None


def epilogue_runner(site: EpilogueSite):
    """(run, a, w): ``run(backend, config=None)`` launches the site's epilogue GEMM on fresh random operands of
    its shape (``config``: that Triton block config instead of the tuned one), a and w its operands."""
    from . import regrouped

    M, N, K, dev, dt = site.M, site.N, site.K, site.device, site.dtype
    a = torch.randn(M, K, device=dev, dtype=dt)
    w = torch.randn(K, N, device=dev, dtype=dt) if site.w_kn else torch.randn(N, K, device=dev, dtype=dt)
    w = w / K ** 0.5
    vec = lambda n: torch.rand(n, device=dev, dtype=torch.float32) + 0.5  # noqa: E731
    row = site.row_norm != "none"
    args = (a, w, vec(N), torch.randn(M, N, device=dev, dtype=dt) if site.residual else None,
            vec(M) if row else None, vec(M) if site.row_norm == "ln" else None,
            vec(N) if site.row_norm == "ln" else None)

    res_norm = ()
    if site.residual_norm != "none":
        res_norm = (site.residual_norm, vec(M), vec(M) if site.residual_norm == "ln" else None, vec(N), vec(N))

    head = {}
    if site.head_dim:
        D, width = site.head_dim, site.rope_dim or site.head_dim  # the tables' width: the rotated dims
        tables = (torch.rand(M, width, device=dev, dtype=dt), torch.rand(M, width, device=dev, dtype=dt)) \
            if site.rope else (None, None)
        weight = torch.rand(D, device=dev, dtype=dt) + 0.5 if site.head_norm else None  # None: RoPE alone
        head = dict(head_dim=D, head_weight=weight, head_eps=1e-6, rope_cos=tables[0], rope_sin=tables[1],
                    rope_interleaved=site.rope_interleaved, rope_dim=site.rope_dim, head_gates=site.head_gates,
                    head_center=site.head_center)

    def run(backend: str, config: Optional[dict] = None):
        call = regrouped.run_epilogue_gemm if config is not None else regrouped.epilogue_gemm
        return call(*args, site.row_norm, site.activation, site.write_aux, site.stats, site.w_kn, *res_norm,
                    backend=backend, **head, **({"config": config} if config is not None else {}))

    return run, a, w


def _measure_epilogue(site: EpilogueSite, screen: Screen = Screen(), cache_root: Optional[str] = None) -> dict:
    """GPU times (ms) of cuBLAS, of the bytes the epilogue saves and of each backend's epilogue GEMM, with
    the Triton kernel's tuned config and each op's host time. cuBLAS and the copy are timed first (nothing to
    compile); a backend the ``screen`` rules out is not compiled (Quack's JIT costs seconds per GEMM, Triton's
    tuning compiles a handful of configs), its reason kept as ``<backend>_reason``. Quack is not compiled once
    this run of the pass has spent its budget on Quack's JIT (``quack_jit_budget``); the result is then marked
    ``incomplete`` (not stored: a later run times Quack)."""
    from .kernels import epilogue_gemm as eg

    M, N, K, dt = site.M, site.N, site.K, site.dtype
    run, a, w = epilogue_runner(site)

    def on(backend):
        return lambda: run(backend)

    wt = w if site.w_kn else w.t()
    src = torch.empty(max(site.saved_bytes // 2 // 2, 1), device=site.device, dtype=torch.float16)
    dst = torch.empty_like(src)
    times = {"mm_ms": graph_ms(lambda: torch.mm(a, wt)), "saved_ms": graph_ms(lambda: sm_copy(dst, src))}
    bound = times["mm_ms"] + times["saved_ms"]
    predicted = _predicted(site, cache_root) if screen.margin else {}
    if predicted:
        times["predicted"] = predicted
        default = _decided_by_model(site, screen, predicted, bound, times["saved_ms"], a)
        if default is not None:  # a clear win: nothing compiled or timed
            return dict(times, decided_by_model=True, triton_config=default)

    triton_reason = ("not asked for (gemm_backends)" if "triton" not in screen.backends
                     else _screened("triton", predicted, bound, screen))
    if triton_reason is None:
        triton_reason = _budget_spent(_TRITON_MEASURE, "measure_budget_s")
        if triton_reason is not None:
            times["incomplete"] = True
    if triton_reason is None:
        with _spending(_TRITON_MEASURE):
            with report.clocked("kernel compile"):
                on("triton")()  # tunes and compiles outside the graph capture
            times["triton_ms"] = graph_ms(on("triton"))
            times["triton_host_ms"] = host_ms(on("triton"))  # priced where the GEMM runs as an op
    else:
        times["triton_reason"] = triton_reason

    # the cheap checks first: importing Quack (on its first structural check) costs seconds (14.5 s on the H200
    # machine), so it is imported only where it would be compiled
    from .kernels import quack_epilogue_gemm as qg

    quack_reason = ("not asked for (gemm_backends)" if "quack" not in screen.backends
                    else qg.install_reason())
    if quack_reason is None and bound <= screen.op_floor_ms:
        quack_reason = (f"not compiled: an op call cannot win where the unfused bound ({bound:.4f} ms) is under "
                        f"min_kernel_ms × min_speedup ({screen.op_floor_ms:.4f} ms)")
    rival = None
    if quack_reason is None:
        host = QUACK_HOST_PER_TRITON_HOST * times.get("triton_host_ms", 0.0) if screen.host_priced else 0.0
        launched = screen.direct_launch and eg.tuned_for(M, N, K, dt, site.w_kn, _site_epilogue(site)) is not None
        rival = (times["triton_ms"] + (times["triton_host_ms"] if screen.host_priced and not launched else 0.0)
                 if "triton_ms" in times else None)
        quack_reason = _screened("quack", predicted, bound, screen, host, rival)
    if quack_reason is None:
        quack_reason = _budget_spent(_QUACK_JIT, "quack_jit_budget_s")
        if quack_reason is not None:
            times["incomplete"] = True
    if quack_reason is None:
        quack_reason = _quack_reason(site, a, w)
    if quack_reason is None:
        quack_reason = _time_quack(times, on("quack"), site, bound, rival, screen)
    times["quack_reason"] = quack_reason
    times["triton_config"] = eg.tuned_for(M, N, K, dt, site.w_kn, _site_epilogue(site))  # for a direct launch
    return times


def _decided_by_model(site: EpilogueSite, screen: Screen, predicted: dict, bound: float, saved_ms: float,
                      a) -> Optional[dict]:
    """The Triton config to launch without compiling or timing anything, where the cost model calls the site a
    clear win: its predicted GPU time (plus the weight fold) times ``win_margin`` still beats the measured bound
    by min_speedup. Only where the pass launches the kernel directly (no op call to price), the kernel would run
    its untuned default config anyway (``epilogue_gemm.default_config``: a large grid; not RoPE's tile, which was
    never timed) and Quack, where asked for and installed, could not beat the prediction by ``margin`` either (it
    would be timed). None: measure. Of the 276 logged sites (benchmarks/cost_model.py), none of the grid size the
    default config takes that the model, fitted without its shape, called a clear win this way had measured short
    of the bound (docs/decisions.md#selection_decided_by_model)."""
    from .kernels import epilogue_gemm as eg
    from .kernels import quack_epilogue_gemm as qg

    if not (screen.win_margin and screen.direct_launch and "triton" in screen.backends and "triton" in predicted):
        return None
    if site.rope:  # the per-head predictions miss by up to 17 % held out: a RoPE GEMM is fused only where timed
        return None
    price = predicted["triton"] + _fold_ms(site.fold_bytes, saved_ms, site.saved_bytes)
    if price * screen.win_margin * screen.min_speedup >= bound:
        return None
    quack_rival = ("quack" in screen.backends and bound > screen.op_floor_ms and "quack" in predicted
                   and predicted["quack"] / screen.margin < predicted["triton"])
    if quack_rival and qg.install_reason() is None:
        return None
    return eg.default_config(a, _site_epilogue(site), site.N)


def _time_quack(times: dict, run, site: EpilogueSite, bound: float, rival: Optional[float],
                screen: Screen) -> Optional[str]:
    """Quack's GPU and host time per call into ``times`` (its JIT costs seconds per config); None, or why it has
    no time. With the screen on, one config (``PROBE_CONFIG``) is compiled and timed first: where even
    ``PROBE_SLACK`` better it would not be chosen (it misses the bound by min_speedup, or Triton's price), its
    time stands for Quack's (the rest of the shortlist was within 2.5 % of it); else the shortlist is tuned, unless
    the compile's Quack JIT budget is spent (the probe's time then stands until a later compile tunes it)."""
    from . import regrouped
    from .kernels import quack_epilogue_gemm as qg

    epilogue = _site_epilogue(site)
    shape = (site.M, site.N, site.K, site.dtype, site.w_kn, epilogue)
    probe = qg.probe_config(site.device, epilogue) if screen.margin and qg.tuned_for(*shape) is None else None
    for config in (probe, None) if probe is not None else (None,):
        if config is not None:
            qg.remember(*shape, config)
        elif probe is not None:  # the probe came close: the whole shortlist, if the compile's budget allows
            if _budget_spent(_QUACK_JIT, "quack_jit_budget_s") is not None:
                times["quack_probe_budget"] = times["incomplete"] = True  # the probe's time stands, for now
                return None
            qg.forget(*shape)
        failed = set(regrouped.QUACK_FAILED)
        with _spending(_QUACK_JIT), report.clocked("Quack JIT"):
            run()  # JIT-compiles (and tunes) outside the graph capture; a failure falls back
        new = [regrouped.QUACK_FAILED[k] for k in regrouped.QUACK_FAILED if k not in failed]
        if new:
            return new[0]
        times["quack_ms"] = graph_ms(run)
        times["quack_host_ms"] = host_ms(run)
        times["quack_config"] = qg.tuned_for(*shape)
        if config is not None:
            best = (times["quack_ms"] + (times["quack_host_ms"] if screen.host_priced else 0.0)) / qg.PROBE_SLACK
            if best * screen.min_speedup >= bound or (rival is not None and best >= rival):
                times["quack_probe_only"] = True  # one config timed: the rest could not make it win
                return None
    return None


def _site_epilogue(site: EpilogueSite):
    """The epilogue the measurement runs (a bias always: its timing covers the sites without one)."""
    from .kernels import epilogue_gemm as eg

    return eg.Epilogue(row_norm=site.row_norm, bias=True, residual=site.residual, activation=site.activation,
                       write_aux=site.write_aux, stats=site.stats, residual_norm=site.residual_norm,
                       head_dim=site.head_dim, rope=site.rope, head_norm=site.head_norm,
                       rope_interleaved=site.rope_interleaved, rope_dim=site.rope_dim,
                       head_gates=site.head_gates, head_center=site.head_center)


def _quack_reason(site: EpilogueSite, a, w) -> Optional[str]:
    """Why Quack is not timed for this GEMM (None: it is), including an earlier failure in this process."""
    from . import regrouped
    from .kernels import quack_epilogue_gemm as qg

    epilogue = _site_epilogue(site)
    reason = qg.unsupported_reason(a, w, site.w_kn, epilogue)
    if reason is None:
        reason = next((why for key, why in regrouped.QUACK_FAILED.items() if key[0] == epilogue), None)
    return reason
