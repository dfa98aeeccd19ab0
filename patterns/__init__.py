"""Pattern families, one module each. A family has ``FUSION`` (its name in the config) and
``apply(graph, ctx)``; a stage runs its steps in order, each where the config enables its fusion. A module's
matchers are its ``FAMILY`` or ``FAMILIES`` (``common.NormFamily``)."""

from . import matmul_norm, norm_attention, pre_norm, regrouped_norm

JOINT_STEPS = (  # the joint-graph stage (aten IR): (fusion, module)
    # the pre-norm sites first (the regrouped rewrite's consumers), then the post-norm takes what is left, then the
    # regrouped rewrite links each rewritten norm to the GEMM that produced its stream
    (pre_norm.FUSION, pre_norm),
    (matmul_norm.FUSION, matmul_norm),
    (regrouped_norm.FUSION, regrouped_norm),
)
PRE_GRAD_STEPS = (  # the torch-level graph, before autograd
    (norm_attention.FUSION, norm_attention),
)
STAGES = {"joint": JOINT_STEPS, "pre_grad": PRE_GRAD_STEPS}


def trace_all() -> None:
    """Trace every family's patterns now (otherwise on first use), e.g. to time it apart from a compile."""
    for steps in STAGES.values():
        for _, module in steps:
            for family in getattr(module, "FAMILIES", None) or [getattr(module, "FAMILY", None)]:
                if family is not None:  # regrouped_norm's link step has no matcher of its own
                    family.matcher  # noqa: B018  (a cached property: traces once per process)
    regrouped_norm.activation_patterns()  # matched within the regrouped sites, not by a family
