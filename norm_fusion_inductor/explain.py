"""``explain(model, *inputs)``: compile once with the plugin and report every normalization site it found —
rewritten or not, the implementation and the reason — as data and as a table."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

import torch

from . import report
from .config import NormFusionConfig


@dataclasses.dataclass
class Explanation:
    sites: list  # report.SiteRecord, in graph order of discovery
    compile_s: float = 0.0  # wall time of the first call: compilation (pass and measurements included) + one run
    pass_seconds: dict = dataclasses.field(default_factory=dict)  # of compile_s, the pass's phases (report.PHASES)
    # the compiled model these sites came from: call it again (same grad mode and input shapes) without recompiling
    compiled: Optional[Callable] = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def rewritten(self) -> list:
        return [s for s in self.sites if s.rewritten]

    @property
    def not_rewritten(self) -> list:
        return [s for s in self.sites if not s.rewritten]

    def table(self) -> str:
        rows = ["| graph | kind | pattern | node | shape | dtype | rewritten | implementation | reason |",
                "|---|---|---|---|---|---|---|---|---|"]
        for s in self.sites:
            shape = "×".join(map(str, s.shape)) if s.shape else "–"
            rows.append(f"| {s.graph} | {s.kind} | {s.pattern} | {s.node} | {shape} | {s.dtype} | "
                        f"{'yes' if s.rewritten else 'no'} | {s.implementation} | {s.reason} |")
        return "\n".join(rows)

    def as_dicts(self) -> list[dict]:
        """The sites as plain data (JSON-ready)."""
        return [dict(dataclasses.asdict(s), kind=s.kind) for s in self.sites]

    def __str__(self) -> str:
        return f"{len(self.rewritten)} of {len(self.sites)} normalization sites rewritten\n" + self.table()


def explain(model, *example_inputs, example_kwargs: Optional[dict] = None, train: bool = False, config=None,
            **config_kwargs) -> Explanation:
    """Compile ``model`` (a module or function) with the ``norm_fusion`` backend, run it once on the example
    inputs (``model(*example_inputs, **example_kwargs)``; with gradients when ``train``: the training graph is
    matched, not the inference one), and return the sites. Caches are bypassed so the pass really runs; the
    model's own state is not changed. The result's ``compiled`` is the compiled model itself, ready to call again."""
    cfg = NormFusionConfig.from_any(config if config is not None else (config_kwargs or None))
    first = len(report.reports())
    compiled = torch.compile(model, backend="norm_fusion", options={"norm_fusion": cfg})
    before = report.seconds()
    start = time.perf_counter()
    with torch._inductor.config.patch(force_disable_caches=True), torch.set_grad_enabled(train):
        compiled(*example_inputs, **(example_kwargs or {}))
    return Explanation(report.reports()[first:], compile_s=time.perf_counter() - start, compiled=compiled,
                       pass_seconds=report.seconds_since(before))
