"""``explain(model, *inputs)``: compile once with the plugin and report every normalization site it found —
rewritten or not, the implementation and the reason — as data and as a table."""

from __future__ import annotations

import dataclasses

import torch

from . import report
from .config import NormFusionConfig


@dataclasses.dataclass
class Explanation:
    sites: list  # report.SiteRecord, in graph order of discovery

    @property
    def rewritten(self) -> list:
        return [s for s in self.sites if s.rewritten]

    @property
    def not_rewritten(self) -> list:
        return [s for s in self.sites if not s.rewritten]

    def table(self) -> str:
        rows = ["| graph | fusion | pattern | node | M×K×N | dtype | rewritten | implementation | reason |",
                "|---|---|---|---|---|---|---|---|---|"]
        for s in self.sites:
            shape = "×".join(map(str, s.shape)) if s.shape else "–"
            rows.append(f"| {s.graph} | {s.fusion} | {s.pattern} | {s.node} | {shape} | {s.dtype} | "
                        f"{'yes' if s.rewritten else 'no'} | {s.implementation} | {s.reason} |")
        return "\n".join(rows)

    def __str__(self) -> str:
        return (f"{len(self.rewritten)} of {len(self.sites)} normalization sites next to a matmul rewritten\n"
                + self.table())


def explain(model, *example_inputs, train: bool = False, config=None, **config_kwargs) -> Explanation:
    """Compile ``model`` (a module or function) with the ``norm_fusion`` backend, run it once on the example
    inputs (with gradients when ``train``: the training graph is matched, not the inference one), and return the
    sites. Caches are bypassed so the pass really runs; the model's own state is not changed."""
    cfg = NormFusionConfig.from_any(config if config is not None else (config_kwargs or None))
    first = len(report.reports())
    compiled = torch.compile(model, backend="norm_fusion", options={"norm_fusion": cfg})
    with torch._inductor.config.patch(force_disable_caches=True), torch.set_grad_enabled(train):
        compiled(*example_inputs)
    return Explanation(report.reports()[first:])
