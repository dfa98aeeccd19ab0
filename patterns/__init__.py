"""Pattern families, one module each. A family has ``FUSION`` (its name in the config) and
``apply(graph, ctx)``; the pass of each stage runs the families the config enables, in this order. A module's
matchers are its ``FAMILY`` or ``FAMILIES`` (``common.NormFamily``)."""

from . import layer_norm_matmul, matmul_norm, norm_attention, regrouped_norm, rms_norm_matmul

FAMILIES = {  # the joint-graph stage (aten IR)
    rms_norm_matmul.FUSION: rms_norm_matmul,
    layer_norm_matmul.FUSION: layer_norm_matmul,
    matmul_norm.FUSION: matmul_norm,
    # the pre-norm families above hand their sites to the regrouped rewrite first (pre_norm.rewrite_pre_norm_site);
    # this runs last and links each rewritten norm to the GEMM that produced its stream
    regrouped_norm.FUSION: regrouped_norm,
}
PRE_GRAD_FAMILIES = {  # the torch-level graph, before autograd
    norm_attention.FUSION: norm_attention,
}
STAGES = {"joint": FAMILIES, "pre_grad": PRE_GRAD_FAMILIES}


def trace_all() -> None:
    """Trace every family's patterns now (otherwise on first use), e.g. to time it apart from a compile."""
    for module in FAMILIES.values():
        for family in getattr(module, "FAMILIES", None) or [getattr(module, "FAMILY", None)]:
            if family is None:  # regrouped_norm: the pre-norm families' matchers serve it
                continue
            family.matcher  # noqa: B018  (a cached property: traces once per process)
