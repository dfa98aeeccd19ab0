"""Pattern families, one module each. A family has ``FUSION`` (its name in the config) and
``apply(graph, ctx)``; the pass runs the families the config enables, in this order."""

from . import layer_norm_matmul, matmul_norm, rms_norm_matmul

FAMILIES = {
    rms_norm_matmul.FUSION: rms_norm_matmul,
    layer_norm_matmul.FUSION: layer_norm_matmul,
    matmul_norm.FUSION: matmul_norm,
}
