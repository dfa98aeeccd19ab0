"""Unmodified transformers models (tiny random configs, nothing downloaded): every RMSNorm / LayerNorm next to
a matmul is fused, or explained; outputs and gradients match eager. transformers is pinned in setup.py's test
extras."""

import collections

import pytest
import torch

import norm_fusion_inductor as nfi

from .helpers import rel_err

transformers = pytest.importorskip("transformers")
from norm_fusion_inductor import hf_models  # noqa: E402

ALWAYS = {"norm_fusion": {"policy": "always", "fusions": nfi.FUSIONS}}


# family → {fusion: sites} under the default fusions (regrouped normalization takes the pre-norm sites,
# the post-norm family the norms after a matmul), every site rewritten. The tiny models have two layers. Per family:
# llama, gemma: 2 pre-norms per layer + the final norm, all regrouped (the producing GEMM of a residual stream
#     writes it and its row statistics; the first norm's statistics come from Inductor's reduction).
# qwen3: as llama; its per-head q/k norms (QK-norm) go, with RoPE, into the q/k projections' epilogue: the q/k/v
#     site's reason says so (QK_NORMS), and they have no record of their own.
# gemma2: the two pre-norms per layer and the final norm (regrouped), and the two sandwich norms per layer on the
#     attention and MLP outputs, with the residual add after them (post-norm: matmul_norm).
# gemma3: gemma2's nine sites, plus the per-head q/k norms as qwen3's.
# olmo2: per layer the post-attention and post-feedforward norms with the residual after them, and the q/k norms
#     over the whole projection outputs (post-norm: matmul_norm); the final norm → lm_head (regrouped).
# t5: encoder 2 per layer + final; decoder 3 per layer + final, all regrouped (the decoder's final norm is scaled
#     by d_model^-0.5 before the tied lm_head) but the encoder's final norm: the model also returns it
#     (encoder_last_hidden_state), so the regrouped family declines it; it follows the last FFN's output
#     projection + residual and is fused as its epilogue (post-norm).
# cohere: one LayerNorm per (parallel) layer feeds q/k/v and gate/up, plus the final norm → lm_head: all regrouped,
#     the LayerNorm written out (mean, then the variance of the centred values).
# cohere_qk (Command R+'s use_qk_norm): cohere's sites, with per-head LayerNorms of q and k (no bias, a weight per
#     head) before the interleaved RoPE: both into the q/k projections' epilogue.
# gpt2: ln_1 → c_attn and ln_2 → c_fc (Conv1D: x @ W, W [K, N]) per layer; ln_f → lm_head: all regrouped.
# vit: layernorm_before → q/k/v, layernorm_after → intermediate per layer (regrouped); the final norm reaches the
#      classifier through the CLS-token slice, and follows the last MLP's output + residual: post-norm.
# bert: all regrouped. The embedding norm (after a sum of embeddings, no matmul; the post-norm family leaves it, as
#      it also feeds the residual add) feeds q/k/v, and the attention output GEMM that reads it as its residual
#      normalizes it on load; each layer's two norms (after the attention output and the FFN output projections
#      + the residual) and the MLM head's norm → decoder likewise.
# gemma4: gemma3's sites and per-head q/k norms, the RMSNorm written with pow(·, -0.5), RoPE before the heads'
#     transpose; plus each layer's per-layer-input projection → norm (post-norm). Its per-head value norms (no
#     weight) are left, as UNFUSED says, and the per-layer inputs' own norm, which feeds no matmul.
# nanochat: every RMSNorm without weight; its per-head q/k norms come after RoPE (rotate_half's signs swapped) and
#     go into the q/k projections' epilogue all the same. Its embedding norm feeds only the first layer's norm.
# hunyuan: as llama, with per-head q/k norms (with weight) after RoPE: into the q/k projections' epilogue, the
#     weight folded into RoPE's tables.
# glm4: gemma2's sites (sandwich norms); its RoPE over the first half of each head, pairs of neighbouring columns,
#     goes into the q/k/v projection's epilogue (ROPE_ALONE).
# glm4_moe (GLM-4.5): as llama4, with per-head q/k norms (with weight) before a rotate-half RoPE over the first half
#     of each head: both into the q/k projections' epilogue (the kernel's rotation over groups of half a head). Its
#     first layer's MLP is dense (regrouped); the second's norm feeds the mixture of experts: post-norm, into o_proj.
# qwen3_5: a linear-attention layer (gated delta rule), then a full-attention one: llama's five regrouped sites; the
#     full-attention layer's q projection also computes each head's output gate (chunked apart), and its per-head
#     q/k norms and the RoPE over a quarter of each head go into the q/k epilogues, the gates passed through. The
#     linear attention's gated norm (norm(x)·silu(z)) reaches its output projection through the gate's multiply:
#     left, as UNFUSED says.
# llama4: RoPE as complex numbers and a weightless per-head norm after it, both before the heads' transpose: into
#     the q/k projections' epilogue (the interleaved RoPE); the norm after attention feeds the mixture of experts
#     (its router and grouped experts: no consumer the regrouped family takes), so the post-norm family fuses it
#     into the attention output's GEMM with the residual.
# The per-head q/k norms (QK-norm) go into the q/k projections' epilogues (QK_NORMS per family), in training too
# (the epilogue then also writes the projection's output for the norm's backward).
EXPECTED = {"llama": {"regrouped_norm": 5}, "gemma": {"regrouped_norm": 5},
            "gemma2": {"regrouped_norm": 5, "matmul_norm": 4}, "gemma3": {"regrouped_norm": 5, "matmul_norm": 4},
            "gemma4": {"regrouped_norm": 5, "matmul_norm": 6}, "glm4": {"regrouped_norm": 5, "matmul_norm": 4},
            "glm4_moe": {"regrouped_norm": 4, "matmul_norm": 1},
            "hunyuan": {"regrouped_norm": 5},
            "llama4": {"regrouped_norm": 3, "matmul_norm": 2},
            "nanochat": {"regrouped_norm": 5}, "qwen3_5": {"regrouped_norm": 5},
            "olmo2": {"regrouped_norm": 1, "matmul_norm": 8}, "qwen3": {"regrouped_norm": 5},
            "cohere": {"regrouped_norm": 3}, "cohere_qk": {"regrouped_norm": 3},
            "t5": {"regrouped_norm": 11, "matmul_norm": 1}, "gpt2": {"regrouped_norm": 5},
            "vit": {"regrouped_norm": 4, "matmul_norm": 1}, "bert": {"regrouped_norm": 6}}
# regrouped q/k/v sites with QK-norm + RoPE (nanochat, hunyuan, llama4: RoPE + QK-norm) in the epilogue
QK_NORMS = {"gemma3": 2, "gemma4": 2, "glm4_moe": 2, "hunyuan": 2, "qwen3_5": 1, "llama4": 2, "nanochat": 2, "qwen3": 2,
            "cohere_qk": 2}
# regrouped q/k/v sites with RoPE alone in the epilogue (no per-head norm): rotate-half (llama), interleaved in fp32
# (cohere), interleaved over half of each head (glm4)
ROPE_ALONE = {"llama": 2, "cohere": 2, "glm4": 2}
# sites no family fuses, each with the start of its reason
UNFUSED = {"gemma4": {("qk_norm", "feeds attention as its values"): 2,
                      ("standalone", "feeds no matmul or attention"): 1},
           "nanochat": {("standalone", "feeds no matmul or attention"): 1},
           "qwen3_5": {("standalone", "feeds no matmul or attention"): 1}}
FAMILIES = list(EXPECTED)
# Trained too (a training compile costs 30-100 s here): one family per norm form the backward sees (gemma4: the
# pow(·, -0.5) RMSNorm, RoPE before the transpose; cohere_qk: the per-head LayerNorm). Left to
# inference: gemma and gemma2 (Gemma's (1 + w) RMSNorm and the sandwich norms, both in gemma3), qwen3 (llama's
# norms, plus QK-norms as gemma3's), vit (pre-norm LayerNorm, as gpt2 and bert's MLM head), t5 (llama's RMSNorm;
# its post-norm site is olmo2's and gemma3's form).
TRAINED = ("llama", "gemma3", "gemma4", "olmo2", "gpt2", "bert", "cohere_qk")
CASES = [(family, False) for family in FAMILIES] + [(family, True) for family in TRAINED]


def _inputs(model):
    return hf_models.example_inputs(model)


def _norm_weights_away_from_init(model):
    for name, p in model.named_parameters():
        if "norm" in name or "ln_" in name:
            p.data.uniform_(0.5, 1.5)


def _assert_gradients_match(model, out, ref, where) -> None:
    """The parameters' gradients of the compiled ``out`` and the eager ``ref`` (same module) under one random output
    gradient, within 1e-4 relative."""
    grad = torch.randn_like(out)
    (out * grad).sum().backward()
    fused = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    (ref * grad).sum().backward()
    for name, p in model.named_parameters():
        if p.grad is not None:  # absolute floor: some gradients are 0 in exact arithmetic (ViT's key bias)
            assert (fused[name] - p.grad).norm() <= 1e-4 * p.grad.norm() + 1e-6, (where, name)


@pytest.mark.parametrize("family, train", CASES,
                         ids=[f"{'training' if train else 'inference'}-{family}" for family, train in CASES])
def test_every_norm_site_fused_or_explained(family, train):
    torch.manual_seed(0)
    newer = {"gemma4": "Gemma4ForCausalLM", "glm4_moe": "Glm4MoeForCausalLM",
             "hunyuan": "HunYuanDenseV1ForCausalLM", "llama4": "Llama4ForCausalLM",
             "nanochat": "NanoChatForCausalLM", "qwen3_5": "Qwen3_5ForCausalLM"}
    if family in newer and not hasattr(transformers, newer[family]):
        pytest.skip(f"transformers {transformers.__version__} has no {family}")
    model = hf_models.tiny_model(family)
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
        _assert_gradients_match(model, out, ref, family)
    sites = nfi.reports()
    lines = [s.line() for s in sites]
    expected = collections.Counter(EXPECTED[family])
    unfused = UNFUSED.get(family, {})
    for (fusion, _), n in unfused.items():
        expected[fusion] += n
    assert collections.Counter(s.fusion for s in sites) == expected, lines
    left = collections.Counter(next(((s.fusion, start) for (fusion, start) in unfused
                                     if s.fusion == fusion and s.reason.startswith(start)), (s.fusion, s.reason))
                               for s in sites if not s.rewritten)
    assert left == collections.Counter(unfused), lines
    qk_in_epilogue = sum("QK-norm + RoPE in the epilogue" in s.reason or "RoPE + QK-norm in the epilogue" in s.reason
                         for s in sites if s.fusion == "regrouped_norm")
    assert qk_in_epilogue == QK_NORMS.get(family, 0), lines
    if family in ROPE_ALONE:
        rope_alone = sum("(RoPE in the epilogue" in s.reason or ", RoPE in the epilogue" in s.reason for s in sites)
        assert rope_alone == ROPE_ALONE[family], lines
    torch._dynamo.reset()


@pytest.mark.parametrize("family", ["llama", "olmo2", "bert", "cohere"])
def test_bf16_inference_matches_float64(family):
    """In bf16 every norm site is rewritten as in fp32 (OLMo2's weight applied before the downcast is a form of
    its own in 16-bit models; BERT's post-norm LayerNorms; Cohere's interleaved RoPE, computed in fp32 and cast
    back, in the q/k projections' epilogue as Llama's rotate-half) and the output matches float64."""
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
    norms = [m for m in model.modules() if type(m).__name__.endswith(("RMSNorm", "LayerNorm"))]
    assert all(s.rewritten for s in nfi.reports()) and len(nfi.reports()) == len(norms), \
        [s.line() for s in nfi.reports()]
    rope = sum("RoPE in the epilogue" in s.reason for s in nfi.reports())
    assert rope == (family in ("llama", "cohere")), [s.line() for s in nfi.reports()]
    assert rel_err(out, ref64) < max(2e-2, 1.5 * rel_err(eager, ref64))
    torch._dynamo.reset()


# (family, train, how the lengths are made dynamic): with dynamic=True batch and sequence are both symbolic (several
# dynamic dims) and each norm's eps a graph input: Llama trained, Qwen3 in inference (its QK-norms + RoPE in the
# q/k projection's epilogue, their eps read by the kernel); Llama with only the sequence marked dynamic.
DYNAMIC_CASES = [("llama", True, "dynamic=True"), ("qwen3", False, "dynamic=True"), ("llama", False, "mark_dynamic")]


@pytest.mark.parametrize("family, train, how", DYNAMIC_CASES, ids=[f"{f}-{h}" for f, _, h in DYNAMIC_CASES])
def test_ten_sequence_lengths_compile_once_and_stay_fused(family, train, how, monkeypatch, tmp_path):
    """Dynamic shapes: one compile serves ten sequence lengths (no recompile), every regrouped site of it rewritten
    (producers included), the output — and in training every gradient — as eager's at each length. On the GPU the
    epilogue GEMMs are launched from Inductor's generated code, the symbolic M (a product of two sizes under
    dynamic=True) read from the input: there the timings are faked (every GEMM wins, the tuning is real), since a
    launch from the generated code needs a measured choice (policy "always" takes the op)."""
    from torch._dynamo.utils import counters
    from torch._inductor.graph import GraphLowering

    from norm_fusion_inductor import selection

    device = "cuda" if torch.cuda.is_available() else "cpu"
    options = ALWAYS
    if device == "cuda":
        real = selection._measure_epilogue
        monkeypatch.setattr(selection, "_measure_epilogue", lambda site, screen=None, cache_root=None: dict(
            real(site, selection.Screen(backends=("triton",))), triton_ms=1e-3, mm_ms=1.0, saved_ms=1e-4))
        options = {"norm_fusion": {"policy": "auto", "fusions": nfi.FUSIONS, "gemm_backends": ("triton",),
                                   "cache_dir": str(tmp_path), "measure_budget_s": float("inf")}}  # all timed
    torch.manual_seed(0)
    model = hf_models.tiny_model(family, layers=1).to(device)
    _norm_weights_away_from_init(model)
    model.train(train)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    codes = []
    torch._dynamo.reset()
    counters.clear()
    nfi.clear_reports()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(GraphLowering, "save_output_code", staticmethod(codes.append))
        compiled = torch.compile(model, backend="norm_fusion", options=options,
                                 dynamic=True if how == "dynamic=True" else None)
        for i, seq in enumerate((5, 12, 7, 16, 3, 9, 20, 11, 6, 14)):
            ids = torch.randint(0, 100, (2, seq), generator=torch.Generator().manual_seed(seq)).to(device)
            if how == "mark_dynamic":
                torch._dynamo.mark_dynamic(ids, 1)
            with torch.set_grad_enabled(train):
                out = compiled(input_ids=ids).logits
                ref = model(input_ids=ids).logits
            assert rel_err(out, ref) < 1e-5, seq
            if train:
                _assert_gradients_match(model, out, ref, seq)
                model.zero_grad()
            if i == 0:
                graphs = counters["stats"]["unique_graphs"]
                sites = nfi.reports()
                regrouped = [s for s in sites if s.fusion == "regrouped_norm"]
                lines = [s.line() for s in sites]
                assert len(regrouped) == EXPECTED[family]["regrouped_norm"] - 2, lines  # one layer of two
                assert all(s.rewritten for s in regrouped), lines
                assert sum("producer GEMM writes the stream" in s.reason for s in regrouped) == 2, lines
                qk = sum("QK-norm + RoPE in the epilogue" in s.reason for s in regrouped)
                assert qk == (1 if family in QK_NORMS else 0), lines
                if device == "cuda":
                    code = "\n".join(codes)
                    assert "epilogue_gemm_kernel" in code and "epilogue_gemm.default(" not in code
                nfi.clear_reports()
    assert counters["stats"]["unique_graphs"] == graphs and not nfi.reports(), "a length recompiled"
    torch._dynamo.reset()
