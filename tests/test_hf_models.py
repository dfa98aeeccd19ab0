"""Unmodified transformers models (tiny random configs, nothing downloaded): every RMSNorm / LayerNorm next to
a matmul is fused, or explained; outputs and gradients match eager. transformers is pinned in setup.py's test
extras."""

import pytest
import torch

import norm_fusion_inductor as nfi

from .helpers import rel_err

transformers = pytest.importorskip("transformers")
from norm_fusion_inductor import hf_models  # noqa: E402

ALWAYS = {"norm_fusion": {"policy": "always", "fusions": nfi.FUSIONS}}


# family → (sites next to a matmul, of which not rewritten). Per family:
# llama, gemma: 2 norms per layer + the final norm, all fused (pre-norm).
# t5: encoder 2 per layer + final; decoder 3 per layer + final. The encoder's final norm, which the model also
#     returns (encoder_last_hidden_state), follows the last FFN's output projection + residual: fused as its
#     epilogue (post-norm). The decoder's final norm is scaled by d_model^-0.5 (tied embeddings) before lm_head:
#     the scale is folded into γ.
# gpt2: ln_1 → c_attn and ln_2 → c_fc (Conv1D: x @ W, W [K, N]) per layer; ln_f → lm_head.
# vit: layernorm_before → q/k/v, layernorm_after → intermediate per layer (pre-norm); the final norm reaches the
#      classifier through the CLS-token slice, and follows the last MLP's output + residual: post-norm.
# bert (post-norm): both norms of each layer (after the attention output and the FFN output projections, + the
#      residual) are fused as the projections' epilogues; the MLM head's norm → decoder is a pre-norm site. The
#      embedding norm (after a sum of embeddings, no matmul) feeds the first projections and the residual add:
#      not rewritten, explained.
# gemma2: the two pre-norms per layer and the final norm (pre-norm), and the two sandwich norms per layer on the
#     attention and MLP outputs, with the residual add after them (post-norm).
# gemma3: gemma2's nine sites; its per-head q/k norms stay unfused (only the regrouped_norm family, not in
#     FUSIONS, takes them, into the q/k projections' epilogues): each of the four is reported as a leftover QK-norm.
# olmo2: per layer the post-attention and post-feedforward norms with the residual after them, and the q/k norms
#     over the whole projection outputs (post-norm); the final norm → lm_head (pre-norm).
# qwen3: as llama, plus per layer the per-head q and k norms (QK-norm), left unfused and reported as gemma3's.
EXPECTED = {"llama": (5, 0), "gemma": (5, 0), "gemma2": (9, 0), "gemma3": (13, 4), "olmo2": (9, 0),
            "qwen3": (9, 4), "t5": (12, 0), "gpt2": (5, 0), "vit": (5, 0), "bert": (6, 1)}
FAMILIES = list(EXPECTED)
# Trained too (a training compile costs 30-100 s here): one family per norm form the backward sees. Left to
# inference: gemma and gemma2 (Gemma's (1 + w) RMSNorm and the sandwich norms, both in gemma3), qwen3 (llama's
# norms, plus QK-norms as gemma3's), vit (pre-norm LayerNorm, as gpt2 and bert's MLM head).
TRAINED = ("llama", "t5", "gemma3", "olmo2", "gpt2", "bert")
CASES = [(family, False) for family in FAMILIES] + [(family, True) for family in TRAINED]


def _inputs(model):
    return hf_models.example_inputs(model)


def _norm_weights_away_from_init(model):
    for name, p in model.named_parameters():
        if "norm" in name or "ln_" in name:
            p.data.uniform_(0.5, 1.5)


@pytest.mark.parametrize("family, train", CASES,
                         ids=[f"{'training' if train else 'inference'}-{family}" for family, train in CASES])
def test_every_norm_site_fused_or_explained(family, train):
    torch.manual_seed(0)
    model = hf_models.tiny_model(family)
    n_sites, n_unfused = EXPECTED[family]
    _norm_weights_away_from_init(model)
    model.train(train)
    if train:  # dropout off, so eager and compiled see the same function
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    inputs = _inputs(model)
    torch._dynamo.reset()
    nfi.clear_reports()
    compiled = torch.compile(model, backend="norm_fusion", options=ALWAYS)
    with torch.set_grad_enabled(train):
        out = compiled(**inputs).logits
        ref = model(**inputs).logits
    assert rel_err(out, ref) < 1e-5
    if train:
        grad = torch.randn_like(out)
        (out * grad).sum().backward()
        fused_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        (ref * grad).sum().backward()
        for name, p in model.named_parameters():
            if p.grad is not None:  # absolute floor: some gradients are 0 in exact arithmetic (ViT's key bias)
                assert (fused_grads[name] - p.grad).norm() <= 1e-4 * p.grad.norm() + 1e-6, name
    sites = nfi.reports()
    assert len(sites) == n_sites, [s.line() for s in sites]
    for site in sites:  # what is left is explained: an embedding norm read by a residual add, or a QK-norm (only
        # the regrouped_norm family, off here, takes one)
        assert (site.rewritten or "also used by output" in site.reason or "aten.add" in site.reason
                or (site.fusion == "qk_norm" and "QK-norm" in site.reason and "regrouped_norm" in site.reason)), \
            site.line()
    assert sum(not s.rewritten for s in sites) == n_unfused, [s.line() for s in sites]
    torch._dynamo.reset()


@pytest.mark.parametrize("family", ["llama", "olmo2"])
def test_bf16_inference_matches_float64(family):
    """In bf16 every norm site is rewritten as in fp32 (OLMo2's weight applied before the downcast is a form of
    its own in 16-bit models) and the output matches float64."""
    torch.manual_seed(0)
    model = hf_models.tiny_model(family, layers=1)
    _norm_weights_away_from_init(model)
    model = model.eval()
    inputs = _inputs(model)
    model64 = type(model)(model.config).double().eval()
    model64.load_state_dict(model.state_dict())
    model = model.bfloat16()
    torch._dynamo.reset()
    nfi.clear_reports()
    with torch.no_grad():
        out = torch.compile(model, backend="norm_fusion", options=ALWAYS)(**inputs).logits
        ref64 = model64(**inputs).logits
        eager = model(**inputs).logits
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    assert all(s.rewritten for s in nfi.reports()) and len(nfi.reports()) == len(norms), \
        [s.line() for s in nfi.reports()]
    assert rel_err(out, ref64) < max(2e-2, 1.5 * rel_err(eager, ref64))
    torch._dynamo.reset()
