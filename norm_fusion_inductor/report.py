"""What the passes did: one record per normalization site, logged and kept for tests and tools.

Logger ``norm_fusion_inductor``; switched on by ``NormFusionConfig(log=True)`` or NORM_FUSION_LOG=1.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import hashlib
import json
import logging
import os
import pathlib
import sys
import time
from typing import Optional

log = logging.getLogger("norm_fusion_inductor")

_HISTORY: list["SiteRecord"] = []
KINDS = {"matmul_norm/rms": "post-norm matmul → RMSNorm", "matmul_norm/ln": "post-norm matmul → LayerNorm",
         "norm_attention": "LayerNorm → attention → RMSNorm", "qk_norm": "norm → attention (QK-norm)",
         "standalone": "norm, no fused neighbour", "regrouped_norm": "norm in the epilogues of the GEMMs around it"}
_SHAPE_NAMES = {"norm_attention": "BxLqxLkxHxD"}
_MAX_HISTORY = 10_000  # older records are dropped
_RECORDED = 0  # records made so far (the history may have dropped the oldest)


class Implementation(str, enum.Enum):
    """What runs a site (a str: reports and logs print the value; enum.StrEnum needs Python 3.11)."""

    __str__, __format__ = str.__str__, str.__format__

    FUSED_TRITON = "fused_triton"  # the post-norm's and the attention block's Triton kernels
    REGROUPED_TRITON = "regrouped_triton"  # the regrouped family's epilogue GEMM on Triton
    REGROUPED_QUACK = "regrouped_quack"  # ... on Quack (CuTe DSL)
    REFERENCE = "reference"  # the custom op's torch reference (policy "always" where no kernel can run it)
    UNFUSED = "unfused"  # the graph as it was


@dataclasses.dataclass
class SiteRecord:
    graph: int  # which compiled graph (a counter)
    fusion: str  # e.g. "regrouped_norm"
    pattern: str  # which form of the norm matched, e.g. "hf_llama/bf16"
    node: str  # FX node name of the normalized output
    rewritten: bool
    reason: str  # why rewritten (the chosen implementation and its measurement) or why not
    shape: Optional[tuple] = None  # (M, K, N) of the matmul when one was found; (B, Lq, Lk, H, D) of an attention
    dtype: Optional[str] = None
    implementation: Optional[str] = None  # an Implementation, with how it launches where that varies
    stage: str = "joint"  # which pass made it: "joint" (aten IR, after autograd) or "pre_grad"

    @property
    def kind(self) -> str:
        """What sort of site, for people: position of the norm, which norm, what it is fused with."""
        if self.fusion == "matmul_norm":
            return KINDS.get(f"{self.fusion}/{self.pattern.split('/')[0]}", self.fusion)
        return KINDS.get(self.fusion, self.fusion)

    def line(self) -> str:
        shape = "x".join(str(s) for s in self.shape) if self.shape else "-"
        status = "REWRITTEN" if self.rewritten else "not rewritten"
        return (f"[graph {self.graph}] {self.fusion} {status}: pattern={self.pattern} node={self.node} "
                f"{_SHAPE_NAMES.get(self.fusion, 'MxKxN')}={shape} dtype={self.dtype} impl={self.implementation}: {self.reason}")


def enable_logging(level: int = logging.INFO) -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("norm_fusion_inductor: %(message)s"))
        log.addHandler(handler)
    if log.level == logging.NOTSET or log.level > level:
        log.setLevel(level)


def record(site: SiteRecord, emit: bool) -> None:
    global _RECORDED
    _RECORDED += 1
    _HISTORY.append(site)
    del _HISTORY[:-_MAX_HISTORY]
    if emit:
        log.info(site.line())
    else:
        log.debug(site.line())


def reports() -> list[SiteRecord]:
    """All site records since the last :func:`clear_reports`, oldest first."""
    return list(_HISTORY)


def clear_reports() -> None:
    _HISTORY.clear()


def recorded_count() -> int:
    return _RECORDED


def since(count: int) -> list[SiteRecord]:
    """The records made after ``recorded_count()`` returned ``count``."""
    new = _RECORDED - count
    return list(_HISTORY[-new:]) if new > 0 else []


# --- where the pass's compile time goes ----------------------------------------------------------------------------
# Seconds per phase, summed over the process; phases nest (a measurement includes its kernels' compile and
# timings). The pass logs what one run over a graph added (``seconds_since``); ``explain`` returns it.

_SECONDS: collections.Counter = collections.Counter()
_OPEN: collections.Counter = collections.Counter()  # blocks of each phase open now (a nested one is not counted)
PHASES = ("pass", "pattern tracing", "measurement", "kernel compile", "GPU timing", "Quack JIT", "child process")


@contextlib.contextmanager
def clocked(phase: str):
    """Count the wall time of the block to ``phase`` (one of ``PHASES``), unless it runs inside another block of
    the same phase (a compile inside a compile counts once)."""
    start = time.perf_counter()
    _OPEN[phase] += 1
    try:
        yield
    finally:
        _OPEN[phase] -= 1
        if not _OPEN[phase]:
            _SECONDS[phase] += time.perf_counter() - start


def seconds() -> dict:
    """Seconds per phase so far in this process."""
    return dict(_SECONDS)


def seconds_since(before: dict) -> dict:
    """Seconds per phase since ``seconds()`` returned ``before`` (phases that took none left out)."""
    return {p: _SECONDS[p] - before.get(p, 0.0) for p in PHASES if _SECONDS[p] - before.get(p, 0.0) > 0}


def format_seconds(spent: dict) -> str:
    """"pass 3.1 s (pattern tracing 0.0, measurement 2.4, ...)"."""
    parts = [f"{p} {spent[p]:.2f}" for p in PHASES[1:] if p in spent]
    return f"pass {spent.get('pass', 0.0):.2f} s" + (f" ({', '.join(parts)})" if parts else "")


# --- site records of graphs the FX graph cache serves -------------------------------------------------------------
# A graph that Inductor's FX-graph or AOTAutograd cache serves never reaches the joint-stage pass, so it would leave
# no records and no log lines. The backend keeps the records of each graph it compiled under a key of the Dynamo
# graph, its inputs and the pass's uuid, and replays them when the pass did not run.

FROM_CACHE = " [kept from an earlier compile: Inductor served this graph from its cache, so the pass did not run]"


def graph_key(gm, example_inputs, pass_uuid: str) -> str:
    import torch

    def describe(x):
        if isinstance(x, torch.Tensor):
            return (tuple(str(d) for d in x.shape), tuple(str(d) for d in x.stride()), str(x.dtype),
                    str(x.device), x.requires_grad)
        return repr(x)

    h = hashlib.sha256()
    for part in (gm.code, repr([describe(x) for x in example_inputs]), str(torch.is_grad_enabled()), pass_uuid,
                 torch.__version__):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _sites_file(cache_root: str, key: str) -> pathlib.Path:
    return pathlib.Path(cache_root) / "sites" / f"{key}.json"


def save_graph_sites(cache_root: str, key: str, sites: list[SiteRecord]) -> None:
    """Keep the joint-stage records of one compiled graph (a read-only cache directory only loses the replay)."""
    rows = [dataclasses.asdict(s) for s in sites if s.stage == "joint"]
    try:
        path = _sites_file(cache_root, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rows))
        tmp.replace(path)
    except OSError:
        pass


def replay_graph_sites(cache_root: str, key: str, graph_id: int, emit: bool) -> int:
    """Record again (and log) the joint-stage records kept for this graph; how many there were."""
    try:
        rows = json.loads(_sites_file(cache_root, key).read_text())
    except (OSError, ValueError):
        return 0
    for row in rows:
        try:
            row["shape"] = tuple(row["shape"]) if row.get("shape") is not None else None
            site = SiteRecord(**row)
        except (TypeError, KeyError):  # written by another version of this record: not replayed
            continue
        site.graph, site.reason = graph_id, site.reason + FROM_CACHE
        record(site, emit)
    return len(rows)
