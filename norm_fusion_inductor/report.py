"""What the passes did: one record per normalization site, logged and kept for tests and tools.

Logger ``norm_fusion_inductor``; switched on by ``NormFusionConfig(log=True)`` or NORM_FUSION_LOG=1.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Optional

log = logging.getLogger("norm_fusion_inductor")

_HISTORY: list["SiteRecord"] = []
KINDS = {"rms_norm_matmul": "pre-norm RMSNorm → matmul", "layer_norm_matmul": "pre-norm LayerNorm → matmul",
         "matmul_norm/rms": "post-norm matmul → RMSNorm", "matmul_norm/ln": "post-norm matmul → LayerNorm",
         "norm_attention": "LayerNorm → attention → RMSNorm", "qk_norm_attention": "QK-norm (± RoPE) → attention",
         "qk_norm": "norm → attention (QK-norm)",
         "standalone": "norm, no fused neighbour"}
_SHAPE_NAMES = {"norm_attention": "BxLqxLkxHxD", "qk_norm_attention": "BxLqxLkxHqxHkxD"}
_MAX_HISTORY = 10_000  # older records are dropped


@dataclasses.dataclass
class SiteRecord:
    graph: int  # which compiled graph (a counter)
    fusion: str  # e.g. "rms_norm_matmul"
    pattern: str  # which form of the norm matched, e.g. "hf_llama/bf16"
    node: str  # FX node name of the normalized output
    rewritten: bool
    reason: str  # why rewritten (the chosen implementation and its measurement) or why not
    shape: Optional[tuple] = None  # (M, K, N) of the matmul when one was found; (B, Lq, Lk, H, D) of an attention
    dtype: Optional[str] = None
    implementation: Optional[str] = None  # "fused_triton", "reference", or "unfused"

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
