"""norm_fusion_inductor: normalization fused into matmuls for torch.compile.

    torch.compile(model, backend="norm_fusion")                                  # a backend of its own
    torch.compile(model, options=norm_fusion_inductor.inductor_options())        # an Inductor stack you have

See README.md.
"""

from . import attention_ops, ops, regrouped  # noqa: F401  (registers torch.ops.norm_fusion.*)
from .attention_ops import flash_norm_attention
from .backend import norm_fusion_backend
from .config import FUSIONS, KNOWN_FUSIONS, NormFusionConfig
from .explain import Explanation, explain
from .passes import NormFusionPass, enabled, inductor_options
from .regrouped import clear_folded_weights
from .report import SiteRecord, clear_reports, reports

__all__ = [
    "Explanation",
    "FUSIONS",
    "KNOWN_FUSIONS",
    "NormFusionConfig",
    "NormFusionPass",
    "SiteRecord",
    "clear_folded_weights",
    "clear_reports",
    "enabled",
    "explain",
    "flash_norm_attention",
    "inductor_options",
    "norm_fusion_backend",
    "reports",
]
__version__ = "0.1.0"


def _register_backend() -> None:
    """The entry point registers ``backend="norm_fusion"`` for installed copies; this covers a source checkout."""
    from torch._dynamo.backends import registry

    # An installed entry point that torch is loading right now is in _BACKENDS already: it registers us itself.
    if "norm_fusion" not in registry._COMPILER_FNS and "norm_fusion" not in registry._BACKENDS:
        registry.register_backend(norm_fusion_backend, name="norm_fusion")


_register_backend()
