"""norm_fusion_inductor: normalization fused into matmuls for torch.compile.

    torch.compile(model, backend="norm_fusion")                                  # a backend of its own
    torch.compile(model, options=norm_fusion_inductor.inductor_options())        # an Inductor stack you have

See README.md.
"""

import importlib.util as _util
import pathlib as _pathlib

# patterns/ sits at the top of the repository (installed as norm_fusion_inductor.patterns by setup.py): from a
# source checkout without an install, the package finds it there
_checkout = _pathlib.Path(__file__).resolve().parent.parent
if (_checkout / "patterns" / "__init__.py").is_file() and _util.find_spec(__name__ + ".patterns") is None:
    __path__.append(str(_checkout))

from . import attention_ops, ops, regrouped  # noqa: E402, F401  (registers torch.ops.norm_fusion.*)
from .attention_ops import flash_norm_attention  # noqa: E402
from .backend import norm_fusion_backend  # noqa: E402
from .config import FUSIONS, KNOWN_FUSIONS, NormFusionConfig  # noqa: E402
from .explain import Explanation, explain  # noqa: E402
from .passes import NormFusionPass, enabled, inductor_options  # noqa: E402
from .regrouped import clear_folded_weights  # noqa: E402
from .report import SiteRecord, clear_reports, reports  # noqa: E402

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
