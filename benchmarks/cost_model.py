"""Checks the regrouped-normalization cost model (``norm_fusion_inductor/cost_model.py``, issue 27) against the
GPU measurements that the selection logged: every "epilogue GEMM on <backend> ... at MxKxN ..." reason in
``benchmarks/results/`` becomes one record (deduplicated on its numbers;
the first file it was found in is kept). Per record it prints the measured and predicted cuBLAS, saved-bytes copy,
Triton and Quack times and the speedup bound / best fused, then a summary: the fraction of records whose predicted
speedup is within ±10 % of the measured one, how often the model's decision at ``--min-speedup`` agrees with the
measured one, and the "clear calls" (predicted speedup outside [min_speedup / 1.15, min_speedup · 1.15]) decided
wrongly. The constants are checked as stored in the module, refitted on all records (in-sample), and held out:
leave-one-shape-out (each M×K×N predicted by constants fitted without it), leave-one-block-out (each model's
layer, e.g. bert_base_layer, predicted by constants fitted on the others) and a date split (fitted on the rounds
up to 2026-12-02c, tested on the later ones; the gated and per-head kinds first appear after it).

    python benchmarks/cost_model.py            # markdown
    python benchmarks/cost_model.py --json     # records, predictions and summaries as JSON
    python benchmarks/cost_model.py --fit      # only the constants refitted on all records (for CALIBRATION)

The fit is the package's (``norm_fusion_inductor/calibrate.py``, shared with ``python -m norm_fusion_inductor
calibrate``). CPU only (numpy and scipy); runs in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout without an install
    sys.path.insert(0, ROOT)


from norm_fusion_inductor import calibrate  # noqa: E402
from norm_fusion_inductor import cost_model as cm  # noqa: E402

DEFAULT_SOURCES = (os.path.join(ROOT, "benchmarks", "results"),)
SUFFIXES = (".log", ".json", ".md", ".txt")
# pytest logs: their selection reasons carry the tests' faked timings (gpu-2026-12-03i/call_f/tests_ten.log: a
# 10x64x128 "triton 2.561 ms"), not measurements
TEST_LOGS = ("tests",)

# ---------------------------------------------------------------------------------------------------------------
# parsing

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_SEGMENT = re.compile(
    r"epilogue GEMM(?: on (?P<backend>[a-z_]+))? " + _NUM + r" ms vs unfused lower bound " + _NUM +
    r" ms \(cuBLAS " + _NUM + r" \+ " + _NUM + r" MB saved " + _NUM + r"\) at ([0-9]+)x([0-9]+)x([0-9]+)")
_BLOCK_ROW = re.compile(r"^\|\s*([A-Za-z0-9_.\-]+)\s*\|\s*(inference|train step|train)\s*\|")
_GPU_HEADER = re.compile(r"^#\s*(NVIDIA [^\s].*?|AMD [^\s].*?)\s{2,}")
_ACTIVATION = re.compile(r"\(activation ([a-z_0-9]+) in the epilogue too\)")
_SITE = re.compile(r"site (?:REWRITTEN|unfused|rewritten) ([a-z_]+) \(([0-9]+), ([0-9]+), ([0-9]+)\)")
_LN_BLOCKS = ("bert", "gpt2", "_ln", "layernorm", "layer_norm", "vit", "opt")
_RMS_BLOCKS = ("llama", "qwen", "mistral", "_rms", "rms", "gemma")


@dataclass
class Record:
    """One timed regrouped GEMM site as the selection logged it (ms are GPU times under a CUDA graph)."""
    M: int
    K: int
    N: int
    kind: str  # cm.KINDS
    chosen: str  # the backend the reason names (the fastest timed), "triton" in the rounds before Quack
    mm_ms: float  # cuBLAS, same product
    saved_mb: float
    saved_ms: float  # copy of the saved bytes
    bound_ms: float  # mm_ms + saved_ms as logged (rounded)
    triton_ms: Optional[float] = None  # the kernel alone: the weight fold per call subtracted
    quack_ms: Optional[float] = None
    quack_reason: Optional[str] = None  # "not offered (...)" where Quack was not timed
    fold_mb: float = 0.0
    fold_ms: float = 0.0  # charged per call on top of each backend's kernel (training: W·γ folded per call)
    needs: Optional[float] = None  # "(needs 1.05x)": declined at that min_speedup
    activation: Optional[str] = None  # the consumer's activation ("silu", "silu_mul", ...), None for the rest
    elem_bytes: int = 2
    dtype: str = "bfloat16"
    gpu: str = "NVIDIA H200"
    block: str = ""
    mode: str = ""
    source: str = ""
    round: str = ""  # the results directory's date (gpu-YYYY-MM-DD[x]) or the file's
    sources: list = field(default_factory=list)

    @property
    def saved_bytes(self) -> float:
        return self.saved_mb * 1e6

    @property
    def fused_ms(self) -> float:
        """The best timed backend, its fold included (what the selection compares with the bound)."""
        return min(t for t in (self.triton_ms, self.quack_ms) if t is not None) + self.fold_ms

    @property
    def speedup(self) -> float:
        return (self.mm_ms + self.saved_ms) / self.fused_ms

    def key(self):
        return (self.gpu, self.M, self.K, self.N, self.kind, self.mm_ms, self.saved_mb, self.saved_ms,
                self.triton_ms, self.quack_ms, self.fold_mb)


def _balanced_groups(text: str):
    """The consecutive top-level " (...)" groups at the start of ``text`` (their inner text) and whether the text
    after them is whole: None where a group is unbalanced (the line was cut)."""
    i, groups = 0, []
    while True:
        j = i
        while j < len(text) and text[j] == " ":
            j += 1
        if j >= len(text) or text[j] != "(":
            return groups
        depth, k = 0, j
        while k < len(text):
            if text[k] == "(":
                depth += 1
            elif text[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        if depth:  # truncated
            return None
        groups.append(text[j + 1:k])
        i = k + 1


def _norm_of(block: str, site: str, text: str) -> Optional[str]:
    """LayerNorm or RMSNorm: from the site's name, else the block's name, else the reason's words."""
    if site == "layer_norm_matmul":
        return "ln"
    if site == "rms_norm_matmul":
        return "rms"
    b = block.lower()
    if any(s in b for s in _LN_BLOCKS):
        return "ln"
    if any(s in b for s in _RMS_BLOCKS):
        return "rms"
    if "LayerNorm" in text:
        return "ln"
    if "RMSNorm" in text:
        return "rms"
    return None


# the activation after each block's norm consumer, for reasons that do not name it (unfused sites, older rounds)
BLOCK_ACTIVATIONS = {"recsys_ln_tower": "gelu", "recsys_rms_tower": "silu", "bert_base_layer": "gelu",
                     "gpt2_medium_layer": "gelu_tanh", "llama3_8b_layer": "silu", "qwen3_1p7b_layer": "silu",
                     "qwen3_8b_layer": "silu"}


def _block_activation(block: str, kind: str) -> Optional[str]:
    act = BLOCK_ACTIVATIONS.get(block)
    return act + "_mul" if act and kind == "gated" else act


def parse_reason(text: str, *, gpu: str = "NVIDIA H200", block: str = "", mode: str = "", dtype: str = "bfloat16",
                 source: str = "", site: str = "", site_shape=None) -> list[Record]:
    """Every complete epilogue-GEMM record in one selection reason (a site's reason may hold several: the
    consumer GEMMs of a regrouped norm and its producer GEMM). The order of the shape is the selection's
    ``at {M}x{K}x{N}`` (selection.choose_epilogue_gemm)."""
    if not site:
        m = _SITE.search(text)
        if m:
            site, site_shape = m.group(1), tuple(int(v) for v in m.groups()[1:])
    norm = _norm_of(block, site, text)
    act = _ACTIVATION.search(text)
    elem = {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype.replace("torch.", ""), 2)
    out = []
    for m in _SEGMENT.finditer(text):
        backend = m.group("backend") or "triton"
        chosen_ms, bound, mm, mb, saved_ms = (float(m.group(i)) for i in range(2, 7))
        M, K, N = (int(m.group(i)) for i in range(7, 10))
        before = text[:m.start()]
        tail = text[m.end():]
        nxt = _SEGMENT.search(tail)
        tail = tail[:nxt.start()] if nxt else tail
        times = {backend: chosen_ms}
        rec = Record(M, K, N, "", backend, mm, mb, saved_ms, bound, elem_bytes=elem, dtype=dtype.replace("torch.", ""),
                     gpu=gpu, block=block, mode=mode, source=source)
        groups = _balanced_groups(tail)
        if groups is None:  # cut inside a group: the same record appears whole in another file
            continue
        for g in groups:
            f = re.match(r"including the weight fold per call, " + _NUM + r" MB: " + _NUM + r" ms", g)
            if f:
                rec.fold_mb, rec.fold_ms = float(f.group(1)), float(f.group(2))
                continue
            n = re.match(r"needs " + _NUM + r"x", g)
            if n:
                rec.needs = float(n.group(1))
                continue
            if re.match(r"(triton|quack) (" + _NUM + r" ms|not offered)", g):
                for part in re.split(r"; (?=(?:triton|quack) )", g):
                    p = re.match(r"(triton|quack) " + _NUM + r" ms$", part)
                    if p:
                        times[p.group(1)] = float(p.group(2))
                    elif part.startswith("quack not offered"):
                        rec.quack_reason = part[len("quack not offered"):].strip()[1:-1]
        for name, ms in times.items():
            setattr(rec, f"{name}_ms", round(ms - rec.fold_ms, 6))
        if rec.triton_ms is None:  # the rounds with Quack always time Triton; a record without it is malformed
            continue
        rec.kind = _kind(rec, before, text, norm, act.group(1) if act else None, site, site_shape, tail)
        if rec.kind in ("activation", "gated"):
            rec.activation = act.group(1) if act else _block_activation(block, rec.kind)
        out.append(rec)
    return out


def _extra_passes(rec: Record) -> int:
    """How many passes over the GEMM output the consumer's saved bytes count: selection.choose_epilogue_gemm
    saves the normalized tensor's share (M·K·e / consumers, or none where the backward reads it) plus two passes
    over the output (M·N·e) with an activation or a per-head norm, less one where the epilogue also writes the
    activation's input (training). The decomposition closest to the logged MB gives the passes (0, 1 or 2); of
    equally close ones (K = N: the norm's share or a pass over the output), the fewest passes."""
    mk, mn = rec.M * rec.K * rec.elem_bytes / 1e6, rec.M * rec.N * rec.elem_bytes / 1e6
    best = min(((round(abs(rec.saved_mb - (share + a * mn)), 1), a) for share in (0.0, mk, mk / 2, mk / 3, mk / 4)
                for a in (0, 1, 2)))
    return best[1]


# the selection's model clause naming Triton alone: the kind is not one Quack takes (cost_model.QUACK_KINDS)
_TRITON_ONLY_MODEL = re.compile(r"\(cost model: triton " + _NUM + r" ms\)")


def _kind(rec: Record, before: str, text: str, norm: Optional[str], act: Optional[str], site: str,
          site_shape, tail: str = "") -> str:
    """The epilogue kind (cost_model.KINDS) from the words around the record."""
    producer = before.rstrip().endswith(("(producer GEMM:", "producer GEMM writes the stream and its row statistics ("))
    if producer:
        ln = norm == "ln" or (rec.quack_reason or "").startswith("LayerNorm statistics")
        return "producer_ln" if ln else "producer_rms"
    extra_pass = _extra_passes(rec) >= 1
    # a per-head norm (QK-norm) that the reason does not name (Gemma3's q projection): two passes over the output
    # saved and a model clause without Quack, which takes every other consumer kind
    if ("QK-norm" in text and ("per-head" in (rec.quack_reason or "") or extra_pass)) or (
            extra_pass and not act and _TRITON_ONLY_MODEL.search(tail)):
        return "per_head"
    gated = act == "silu_mul" or (site_shape is not None and rec.N == 2 * site_shape[2])
    if extra_pass:
        return "gated" if gated else "activation"
    return "consumer_ln" if norm == "ln" else "consumer_rms"


def _round_of(path: str) -> str:
    m = re.search(r"(20[0-9]{2}-[0-9]{2}-[0-9]{2}[a-z]?)", path)
    if m:
        return m.group(1)
    return ""


def _walk_json(obj, ctx, found):
    if isinstance(obj, dict):
        ctx = dict(ctx)
        for k in ("block", "dtype", "gpu", "device"):
            if isinstance(obj.get(k), str):
                ctx[k] = obj[k]
        if "train" in obj:
            ctx["mode"] = "train step" if obj["train"] else "inference"
        for v in obj.values():
            _walk_json(v, ctx, found)
    elif isinstance(obj, list):
        # a site record: [rewritten, name, shape, reason]
        if len(obj) == 4 and isinstance(obj[1], str) and isinstance(obj[3], str) and isinstance(obj[2], list):
            sctx = dict(ctx, site=obj[1], site_shape=tuple(obj[2]) if len(obj[2]) == 3 else None)
            found.append((obj[3], sctx))
            return
        for v in obj:
            _walk_json(v, ctx, found)
    elif isinstance(obj, str) and "epilogue GEMM" in obj:
        found.append((obj, ctx))


def parse_text(text: str, source: str = "<text>") -> list[Record]:
    """Records of a log (or markdown) file: the GPU from its "# NVIDIA ..." header, the block from its table row."""
    gpu, block, mode, dtype = "NVIDIA H200", "", "", "bfloat16"
    out = []
    for line in text.splitlines():
        h = _GPU_HEADER.match(line)
        if h:
            gpu = h.group(1).strip()
            continue
        b = _BLOCK_ROW.match(line)
        if b and b.group(1) != "block":
            block, mode = b.group(1), b.group(2)
        if "epilogue GEMM" in line:
            out += parse_reason(line, gpu=gpu, block=block, mode=mode, dtype=dtype, source=source)
    return out


def parse_file(path: str) -> list[Record]:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if "epilogue GEMM" not in text:
        return []
    if path.endswith(".json"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if obj is not None:
            found = []
            _walk_json(obj, {}, found)
            out = []
            for reason, ctx in found:
                dev = ctx.get("gpu") or ctx.get("device") or "NVIDIA H200"
                out += parse_reason(reason, gpu=dev if dev.startswith(("NVIDIA", "AMD")) else "NVIDIA H200",
                                    block=ctx.get("block", ""), mode=ctx.get("mode", ""),
                                    dtype=ctx.get("dtype", "bfloat16"), source=path, site=ctx.get("site", ""),
                                    site_shape=ctx.get("site_shape"))
            return out
    return parse_text(text, path)


def load_records(sources: Iterable[str] = DEFAULT_SOURCES) -> list[Record]:
    """All records under ``sources`` (files or directories), deduplicated on their numbers; a record keeps the
    first file it was found in (sorted paths) and lists the others in ``sources``."""
    paths = []
    for src in sources:
        if os.path.isfile(src):
            paths.append(src)
        elif os.path.isdir(src):
            for d, _, files in os.walk(src):
                paths += [os.path.join(d, f) for f in files if f.endswith(SUFFIXES)]
    seen: dict = {}
    for path in sorted(paths, key=lambda p: (_round_of(p), p)):
        if os.path.basename(path).startswith(TEST_LOGS):
            continue
        for r in parse_file(path):
            r.round = _round_of(path)
            rel = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
            r.source = rel
            k = r.key()
            if k in seen:
                if rel not in seen[k].sources:
                    seen[k].sources.append(rel)
                continue
            r.sources = [rel]
            seen[k] = r
    # the same measurement logged without Quack's part (a Triton-only configuration reusing the cached times, as
    # blocks.py's sites_triton, or a line cut right after "at MxKxN") is dropped where the whole one is there
    def same(r):
        return r.gpu, r.M, r.K, r.N, r.kind, r.mm_ms, r.saved_ms, r.triton_ms, r.fold_mb

    def partial(r):
        return r.quack_ms is None and r.quack_reason is None

    whole = {same(r): r for r in seen.values() if not partial(r)}
    out = []
    for r in seen.values():
        if partial(r) and same(r) in whole:
            whole[same(r)].sources += [s for s in r.sources if s not in whole[same(r)].sources]
            continue
        out.append(r)
    return out


# ---------------------------------------------------------------------------------------------------------------
# the model's inputs from a record, fitting and scoring

def aux_of(r: Record) -> bool:
    """Whether the epilogue also writes the activation's input (training): the saved bytes count one pass over
    the output instead of two."""
    return r.kind in ("activation", "gated") and _extra_passes(r) == 1


# the first run whose Triton epilogue took the 16-bit erf for GELU (bf16/fp16 outputs), as (round, source);
# earlier runs ran the fp32 one (cost_model's alu_ps "gelu_fp32") on every output
ERF16_FROM = ("2026-12-03c", "gpu-2026-12-03c/call_d")
# the first run whose bf16 outputs took σ and tanh on one MUFU operation (alu_ps "silu_fast", ...)
FAST_SIGMOID_FROM = ("2026-12-03d", "gpu-2026-12-03d/call_a")


def _run(r: Record) -> tuple:
    return (r.round, r.source.replace(os.sep, "/").split("benchmarks/results/")[-1])


def _fp32_erf(r: Record) -> bool:
    """Whether ``r``'s GELU(erf) ran the fp32 erf (every run before ERF16_FROM)."""
    return (r.activation or "").replace("_mul", "") == "gelu" and _run(r) < ERF16_FROM


def priced_activation(r: Record) -> Optional[str]:
    """``r``'s activation named as its round's kernel ran it (the name ``alu_ps`` prices): "gelu_fp32" before
    ERF16_FROM, the one-MUFU forms (``cost_model.priced_activation``) for bf16 from FAST_SIGMOID_FROM."""
    if _fp32_erf(r):
        return r.activation.replace("gelu", "gelu_fp32")
    return cm.priced_activation(r.activation, r.dtype == "bfloat16" and _run(r) >= FAST_SIGMOID_FROM)


def predict_record(cal: dict, r: Record) -> dict:
    """The model's times for ``r`` and its predicted speedup over the backends the record timed (the weight fold
    per call charged at the predicted copy rate, as the selection does with the measured one)."""
    p = cm.predict_with(cal, r.M, r.N, r.K, r.elem_bytes, r.kind, r.saved_bytes, aux=aux_of(r),
                        activation=priced_activation(r))
    fold = r.fold_mb * 1e6 * p["saved_ms"] / r.saved_bytes if r.fold_mb and r.saved_bytes else \
        r.fold_mb * 1e6 / cal["copy"]["bw"]
    timed = [p[f"{b}_ms"] for b in ("triton", "quack") if getattr(r, f"{b}_ms") is not None
             and p[f"{b}_ms"] is not None]
    p["fold_ms"] = fold
    p["fused_ms"] = min(timed) + fold
    p["speedup"] = (p["mm_ms"] + p["saved_ms"]) / p["fused_ms"]
    return p


def measurement(r: Record) -> calibrate.Measurement:
    """``r`` as the fit's record, its activation named as its round's kernel ran it (``priced_activation``)."""
    return calibrate.Measurement(r.M, r.K, r.N, r.kind, r.mm_ms, r.saved_bytes, r.saved_ms, r.triton_ms, r.quack_ms,
                                 priced_activation(r), aux_of(r), r.elem_bytes)


def fit(records: list[Record], base: Optional[dict] = None) -> dict:
    """Constants fitted to ``records`` by ``calibrate.fit`` (the package's fit, shared with ``python -m
    norm_fusion_inductor calibrate``), starting from ``base`` (the stored H200 calibration)."""
    return calibrate.fit([measurement(r) for r in records], base or cm.CALIBRATION["NVIDIA H200"])


def score(pairs: list[tuple[Record, dict]], min_speedup: float = 1.05, clear: float = 1.15) -> dict:
    """Accuracy of predicted speedups (and component times) over (record, prediction) pairs."""
    n = len(pairs)
    if not n:
        return {"records": 0}
    within = within_selection = agree = clear_n = clear_wrong = 0
    comp_err = {c: [] for c in ("mm", "saved", "triton", "quack")}
    for r, p in pairs:
        ms, ps = r.speedup, p["speedup"]
        within += abs(ps / ms - 1.0) <= 0.10
        # as the selection predicts: cuBLAS, the copy and the fold measured (nothing to compile), the GEMM modelled
        selection_ps = (r.mm_ms + r.saved_ms) / (p["fused_ms"] - p["fold_ms"] + r.fold_ms)
        within_selection += abs(selection_ps / ms - 1.0) <= 0.10
        agree += (ps >= min_speedup) == (ms >= min_speedup)
        if ps < min_speedup / clear or ps > min_speedup * clear:
            clear_n += 1
            clear_wrong += (ps >= min_speedup) != (ms >= min_speedup)
        for c in comp_err:
            m = getattr(r, f"{c}_ms")
            if m is not None and p.get(f"{c}_ms") is not None:
                comp_err[c].append(abs(p[f"{c}_ms"] / m - 1.0))
    med = lambda v: sorted(v)[len(v) // 2] if v else None  # noqa: E731
    return {"records": n, "within_10pct": within / n, "within_10pct_selection": within_selection / n,
            "decision_agreement": agree / n, "clear_calls": clear_n,
            "clear_call_errors": clear_wrong, "min_speedup": min_speedup,
            "component_median_abs_err": {c: med(v) for c, v in comp_err.items()},
            "component_max_abs_err": {c: (max(v) if v else None) for c, v in comp_err.items()}}


def screen_score(pairs: list[tuple[Record, dict]], min_speedup: float = 1.05, margin: float = 1.2) -> dict:
    """The selection's screen (``selection._screened``): a backend whose predicted kernel time, divided by
    ``margin``, misses the measured bound by ``min_speedup`` is not compiled. Over every timed backend of the
    records: how many the screen skips, and how many of those the measurement (the weight fold included) fused."""
    timed = screened = wrong = 0
    for r, p in pairs:
        bound = r.mm_ms + r.saved_ms
        for b in ("triton", "quack"):
            if getattr(r, f"{b}_ms") is None or p.get(f"{b}_ms") is None:
                continue
            timed += 1
            if p[f"{b}_ms"] / margin * min_speedup >= bound:
                screened += 1
                wrong += bound / (getattr(r, f"{b}_ms") + r.fold_ms) >= min_speedup
    return {"timed": timed, "screened": screened, "screened_but_passing": wrong, "margin": margin}


H200_SMS = 132
DEFAULT_TILE_MIN_WAVES = 1.9  # epilogue_gemm.DEFAULT_TILE_MIN_WAVES at its 128x256 tile


def win_score(pairs: list[tuple[Record, dict]], min_speedup: float = 1.05, margin: float = 1.2) -> dict:
    """The selection's clear wins (``selection._decided_by_model``): a Triton GEMM of 1.9 waves or more whose
    predicted time (the measured fold added) times ``margin`` still beats the measured bound by ``min_speedup``
    is taken without compiling it. Over the records with a Triton time: how many it takes, how many of those
    measured short of min_speedup and of 0.98, and the least measured speedup among them."""
    taken, speedups = 0, []
    for r, p in pairs:
        if r.triton_ms is None or p.get("triton_ms") is None:
            continue
        tiles = -(-r.M // 128) * -(-r.N // 256)
        if tiles < DEFAULT_TILE_MIN_WAVES * H200_SMS:
            continue
        bound = r.mm_ms + r.saved_ms
        if (p["triton_ms"] + r.fold_ms) * margin * min_speedup < bound:
            taken += 1
            speedups.append(bound / (r.triton_ms + r.fold_ms))
    return {"taken": taken, "short_of_min_speedup": sum(s < min_speedup for s in speedups),
            "slower_than_0.98": sum(s < 0.98 for s in speedups), "least_speedup": min(speedups, default=None),
            "margin": margin}


def held_out(records: list[Record], group, base: dict) -> list[tuple[Record, dict]]:
    """Each group of records predicted by constants fitted on the other groups."""
    groups: dict = {}
    for r in records:
        groups.setdefault(group(r), []).append(r)
    pairs = []
    for g, members in groups.items():
        cal = fit([r for r in records if group(r) != g], base)
        pairs += [(r, predict_record(cal, r)) for r in members]
    order = {id(r): i for i, r in enumerate(records)}
    return sorted(pairs, key=lambda rp: order[id(rp[0])])


DATE_SPLIT = "2026-12-02c"  # fit on the rounds up to this one, test on the later ones
# the first run of today's epilogue kernel for every kind the records have (fffc312: one-MUFU activations, the
# residual read after the k-loop and two-segment statistics tiles on by default; gpu-2026-12-03e calls c-e ran it,
# and its earlier calls left no records); later kernel commits changed other epilogues (post-norm, RoPE alone) or,
# 735ef53, the config of large grids (DEFAULT_TILE: within 4.1 % of the tuned one at every grid site)
KERNEL_FROM = ("2026-12-03e", "")


def current_kernel(r: Record) -> bool:
    """Whether ``r`` timed today's epilogue kernel (``KERNEL_FROM``): the held-out rows' "current kernel" scores."""
    return _run(r) >= KERNEL_FROM


def _site(r: Record) -> tuple:
    """One benchmark site: a block's GEMM at one shape and epilogue (its repeat timings share it)."""
    return (r.block, r.mode, r.kind, r.M, r.K, r.N, aux_of(r))


def site_score(pairs: list[tuple[Record, dict]]) -> dict:
    """Per benchmark site rather than per timing: the median of a site's predicted speedups (as the selection
    predicts them) within ±10 % of the median of its measured ones. A site timed ten times weighs as one timed
    once, and its timings' own spread (``repeatability``) no longer counts ten times."""
    sites: dict = {}
    for r, p in pairs:
        selection_ps = (r.mm_ms + r.saved_ms) / (p["fused_ms"] - p["fold_ms"] + r.fold_ms)
        sites.setdefault(_site(r), []).append((r.speedup, selection_ps))
    within = sum(abs(statistics.median(ps for _, ps in v) / statistics.median(ms for ms, _ in v) - 1.0) <= 0.10
                 for v in sites.values())
    return {"sites": len(sites), "within_10pct_selection": within / max(len(sites), 1)}


def repeatability(records: list[Record]) -> dict:
    """How well a site's measured speedup repeats on today's kernel: over the sites timed more than once (same
    block, mode and shape; ``current_kernel``), the share of timings within ±10 % of their site's median — what a
    model that knew each site's median would score against the ±10 % target."""
    sites: dict = {}
    for r in records:
        if current_kernel(r):
            sites.setdefault(_site(r), []).append(r.speedup)
    repeated = [v for v in sites.values() if len(v) > 1]
    timings = [(s, statistics.median(v)) for v in repeated for s in v]
    return {"sites": len(repeated), "timings": len(timings),
            "within_10pct": sum(abs(s / m - 1.0) <= 0.10 for s, m in timings) / max(len(timings), 1),
            "widest": max((max(v) / min(v) for v in repeated), default=None)}


def evaluate(records: list[Record], min_speedup: float = 1.05, gpu: str = "NVIDIA H200") -> dict:
    base = cm.CALIBRATION[gpu]
    stored = [(r, predict_record(cm.CALIBRATION[r.gpu], r)) for r in records if r.gpu in cm.CALIBRATION]
    fitted = fit(records, base)
    insample = [(r, predict_record(fitted, r)) for r in records]
    loso = held_out(records, lambda r: (r.M, r.K, r.N), base)
    lobo = held_out(records, lambda r: r.block or "?", base)
    early = [r for r in records if r.round <= DATE_SPLIT]
    late_cal = fit(early, base) if early else None  # (the H200's records span the split; other GPUs' may not)
    late = [(r, predict_record(late_cal, r)) for r in records if r.round > DATE_SPLIT] if early else []
    screens = {f"{name} (margin {margin})": screen_score(pairs, min_speedup, margin)
               for name, pairs in (("stored", stored), ("leave_one_shape_out", loso), ("date_split", late))
               for margin in (1.15, 1.2)}
    wins = {f"{name} (margin {margin})": win_score(pairs, min_speedup, margin)
            for name, pairs in (("stored", stored), ("leave_one_shape_out", loso), ("leave_one_block_out", lobo),
                                ("date_split", late))
            for margin in (1.05, 1.1, 1.15, 1.2)}
    return {
        "fitted": fitted,
        "repeatability": repeatability(records),
        "per_site": {name: site_score(pairs) for name, pairs in (
            ("stored", stored), ("leave_one_shape_out", loso), ("leave_one_block_out", lobo),
            ("leave_one_shape_out, current kernel", [rp for rp in loso if current_kernel(rp[0])]),
            ("leave_one_block_out, current kernel", [rp for rp in lobo if current_kernel(rp[0])]))},
        "screens": screens,
        "wins": wins,
        "pairs": {"stored": stored, "in_sample": insample, "leave_one_shape_out": loso,
                  "leave_one_block_out": lobo, "date_split": late},
        "summary": {"stored": score(stored, min_speedup), "in_sample": score(insample, min_speedup),
                    "leave_one_shape_out": score(loso, min_speedup),
                    "leave_one_block_out": score(lobo, min_speedup),
                    "leave_one_shape_out, current kernel": score([rp for rp in loso if current_kernel(rp[0])],
                                                                 min_speedup),
                    "leave_one_block_out, current kernel": score([rp for rp in lobo if current_kernel(rp[0])],
                                                                 min_speedup),
                    f"date_split (fit <= {DATE_SPLIT}: {len(early)} records)": score(late, min_speedup)},
    }


# ---------------------------------------------------------------------------------------------------------------
# output

def _f(v, digits=4):
    return "–" if v is None else f"{v:.{digits}f}"


def _short(path: str) -> str:
    return path.replace("benchmarks/results/", "")


def markdown(records: list[Record], ev: dict, min_speedup: float) -> str:
    stored = dict((id(r), p) for r, p in ev["pairs"]["stored"])
    loso = dict((id(r), p) for r, p in ev["pairs"]["leave_one_shape_out"])
    lines = [f"# Regrouped-normalization cost model vs the logged GPU measurements ({len(records)} records)", "",
             "Times in ms, measured / predicted (the stored constants); speedup = (cuBLAS + copy) / (best timed "
             "backend + weight fold per call); LOSO: predicted by constants fitted without the record's shape. "
             f"Decision: fuse where the speedup ≥ {min_speedup}.", "",
             "| # | source | block | kind | M×K×N | saved MB | cuBLAS | copy | triton | quack | fold | speedup meas "
             "| pred | LOSO | decision meas / pred |",
             "|---:|---|---|---|---|---:|---|---|---|---|---:|---:|---:|---:|---|"]
    for i, r in enumerate(records, 1):
        p, lo = stored.get(id(r)), loso[id(r)]
        dm = "fuse" if r.speedup >= min_speedup else "keep"
        dp = "fuse" if p and p["speedup"] >= min_speedup else "keep"
        kind = r.kind + (" +aux" if aux_of(r) else "")
        quack = f"{_f(r.quack_ms)} / {_f(p['quack_ms'] if p else None)}" if r.quack_ms is not None else \
            f"– / {_f(p['quack_ms'] if p else None)}"
        lines.append(
            f"| {i} | {_short(r.source)} | {r.block} {r.mode} | {kind} | {r.M}×{r.K}×{r.N} | {r.saved_mb:.1f} | "
            f"{_f(r.mm_ms)} / {_f(p and p['mm_ms'])} | {_f(r.saved_ms)} / {_f(p and p['saved_ms'])} | "
            f"{_f(r.triton_ms)} / {_f(p and p['triton_ms'])} | {quack} | {r.fold_ms:.4f} | {r.speedup:.3f} | "
            f"{_f(p and p['speedup'], 3)} | {lo['speedup']:.3f} | {dm} / {dp}{'' if dm == dp else ' ✗'} |")
    lines += ["", "## Summary", "",
              f"Within ±10 %: predicted speedup within 10 % of the measured one (the issue's target: ≥ 90 %), "
              f"every time predicted; as the selection: cuBLAS, the copy and the fold measured (nothing to "
              f"compile), the fused GEMM predicted. "
              f"Agreement: the model's decision at min_speedup {min_speedup} equals the measured one. Clear calls: "
              f"predicted speedup outside [{min_speedup}/1.15, {min_speedup}·1.15] = "
              f"[{min_speedup / 1.15:.3f}, {min_speedup * 1.15:.3f}].", "",
              "| constants | records | within ±10 % | as the selection | decision agreement | clear calls | clear calls "
              "wrong | median abs err cuBLAS / copy / triton / quack |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, s in ev["summary"].items():
        if not s["records"]:
            lines.append(f"| {name} | 0 | | | | | | |")
            continue
        med = s["component_median_abs_err"]
        errs = " / ".join("–" if med[c] is None else f"{med[c]:.1%}" for c in ("mm", "saved", "triton", "quack"))
        lines.append(f"| {name} | {s['records']} | {s['within_10pct']:.1%} | {s['within_10pct_selection']:.1%} | "
                     f"{s['decision_agreement']:.1%} | "
                     f"{s['clear_calls']} | {s['clear_call_errors']} | {errs} |")
    rep = ev["repeatability"]
    lines += ["", f"Repeatability (today's kernel): of the {rep['timings']} timings of the {rep['sites']} sites timed "
              f"more than once, {rep['within_10pct']:.1%} lie within ±10 % of their site's median speedup (the "
              f"widest site spans {_f(rep['widest'], 3)}×): the ceiling of any model against the ±10 % target."]
    lines += ["", "Per benchmark site (a block's GEMM at one shape and epilogue): the median of its predicted speedups "
              "(as the selection) within ±10 % of the median of its measured ones", "",
              "| constants | sites | within ±10 % |", "|---|---:|---:|"]
    for name, sc in ev["per_site"].items():
        lines.append(f"| {name} | {sc['sites']} | {sc['within_10pct_selection']:.1%} |")
    lines += ["", "The selection's screen (model_margin): of the backends the records timed, those whose predicted "
              f"time ÷ margin misses the bound by {min_speedup} (not compiled), and how many of those passed as "
              "measured", "", "| constants (margin) | timed | screened | screened but passing |",
              "|---|---:|---:|---:|"]
    for name, sc in ev["screens"].items():
        lines.append(f"| {name} | {sc['timed']} | {sc['screened']} | {sc['screened_but_passing']} |")
    lines += ["", f"The selection's clear wins (model_margin): of the Triton timings of 1.9 waves or more, those whose "
              f"predicted time (+ fold) × margin beats the bound by {min_speedup} (taken untimed), how many of those "
              f"measured short of {min_speedup} and of 0.98, and the least measured speedup", "",
              "| constants (margin) | taken | short of min_speedup | under 0.98 | least measured |",
              "|---|---:|---:|---:|---:|"]
    for name, w in ev["wins"].items():
        lines.append(f"| {name} | {w['taken']} | {w['short_of_min_speedup']} | {w['slower_than_0.98']} | "
                     f"{_f(w['least_speedup'], 3)} |")
    lines += ["", "Per kind (stored constants): records, within ±10 %, median |predicted / measured − 1| of Triton "
              "/ Quack", "",
              "| kind | records | within ±10 % | Triton err | Quack err |", "|---|---:|---:|---:|---:|"]
    by_kind: dict = {}
    for r, p in ev["pairs"]["stored"]:
        by_kind.setdefault(r.kind, []).append((r, p))
    for kind in cm.KINDS:
        pairs = by_kind.get(kind, [])
        if not pairs:
            continue
        s = score(pairs, min_speedup)
        med = s["component_median_abs_err"]
        lines.append(f"| {kind} | {len(pairs)} | {s['within_10pct']:.1%} | {_f(med['triton'], 3)} | "
                     f"{_f(med['quack'], 3)} |")
    lines += ["", "Refitted constants (all records):", "", "```", _constants_text(ev["fitted"]), "```"]
    return "\n".join(lines)


def _rounded(v):
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    return v


def _constants_text(cal: dict) -> str:
    return "\n".join(f'"{k}": {json.dumps(_rounded(cal[k]))},' for k in ("copy", "mm", "triton", "quack") if k in cal)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="records, predictions and summaries as JSON")
    ap.add_argument("--fit", action="store_true", help="print only the constants refitted on all records")
    ap.add_argument("--min-speedup", type=float, default=1.05)
    ap.add_argument("--gpu", default="NVIDIA H200", choices=sorted(cm.CALIBRATION),
                    help="the GPU model whose records and committed constants are checked")
    ap.add_argument("sources", nargs="*", default=list(DEFAULT_SOURCES),
                    help="files or directories with the selection's logs (default: benchmarks/results)")
    args = ap.parse_args(argv)
    records = [r for r in load_records(args.sources) if r.gpu == args.gpu]
    records.sort(key=lambda r: (r.round, r.source, r.M, r.K, r.N))
    if not records:
        sys.exit("no epilogue-GEMM records found in " + ", ".join(args.sources))
    if args.fit:
        print(_constants_text(fit(records, cm.CALIBRATION[args.gpu])))
        return
    ev = evaluate(records, args.min_speedup, args.gpu)
    if args.json:
        preds = {name: dict((id(r), p) for r, p in pairs) for name, pairs in ev["pairs"].items()}
        out = {"records": [], "summary": ev["summary"], "screens": ev["screens"], "stored_constants": cm.CALIBRATION,
               "fitted_constants": _rounded({k: ev["fitted"][k] for k in ("copy", "mm", "triton", "quack") if k in ev["fitted"]})}
        for r in records:
            d = asdict(r)
            d.update(aux=aux_of(r), speedup=r.speedup, fused_ms=r.fused_ms)
            d["predicted"] = {name: preds[name].get(id(r)) for name in preds}
            out["records"].append(d)
        print(json.dumps(out, indent=1, default=str))
        return
    print(markdown(records, ev, args.min_speedup))


if __name__ == "__main__":
    main()
