"""Tiny HuggingFace ``transformers`` models by family name — random weights from a small config, nothing
downloaded — with example inputs. Used by ``python -m norm_fusion_inductor explain``, the examples and the
coverage tests. Needs ``transformers`` (in the test extras).

Each family is the library's own model class, unmodified: what the plugin must match is the graph that real
model code produces.
"""

from __future__ import annotations

from typing import Callable

import torch

VOCAB = 128


def _transformers():
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - a clear message instead of a bare ImportError
        raise ImportError("tiny HuggingFace models need `pip install transformers`") from e
    return transformers


def _decoder(model_class, config_class, hidden, layers, **extra):
    """A decoder-only LM's small config: 4 query heads of hidden / 4, MLP 2 × hidden."""
    return model_class, config_class, dict(
        vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, max_position_embeddings=64, **extra)


def _llama(t, hidden, layers):
    return _decoder(t.LlamaForCausalLM, t.LlamaConfig, hidden, layers, num_key_value_heads=2)


def _glm4(t, hidden, layers):
    """GLM-4: RoPE over the first half of each head, its pairs neighbouring columns (the tables sliced and repeated
    after their unsqueeze); sandwich norms as Gemma 2's; a fused gate/up projection."""
    return _decoder(t.Glm4ForCausalLM, t.Glm4Config, hidden, layers, num_key_value_heads=2, head_dim=hidden // 4,
                    pad_token_id=0)


def _glm4_moe(t, hidden, layers):
    """GLM-4.5: per-head q/k norms, then rotate-half RoPE over the first half of each head; the first layer's MLP
    dense, the others mixtures of experts (2 routed, 1 per token) with a shared expert."""
    return _decoder(t.Glm4MoeForCausalLM, t.Glm4MoeConfig, hidden, layers, num_key_value_heads=2,
                    head_dim=hidden // 4, use_qk_norm=True, n_routed_experts=2, num_experts_per_tok=1,
                    moe_intermediate_size=hidden, n_shared_experts=1, first_k_dense_replace=1, num_mtp_layers=0,
                    pad_token_id=0)


def _gemma(t, hidden, layers):
    return _decoder(t.GemmaForCausalLM, t.GemmaConfig, hidden, layers, num_key_value_heads=1, head_dim=hidden // 4)


def _gemma2(t, hidden, layers):
    """Sandwich norms: each sublayer's output is normalized before its residual add (post-norm), its input too."""
    return _decoder(t.Gemma2ForCausalLM, t.Gemma2Config, hidden, layers, num_key_value_heads=2,
                    head_dim=hidden // 4)


def _gemma3(t, hidden, layers):
    """Gemma 2's sandwich norms, plus per-head q/k norms in Gemma's (1 + w) form before sliding-window attention
    (a mask)."""
    return _decoder(t.Gemma3ForCausalLM, t.Gemma3TextConfig, hidden, layers, num_key_value_heads=2,
                    head_dim=hidden // 4, sliding_window=8)


def _gemma4(t, hidden, layers):
    """Gemma 3's sandwich norms and per-head q/k norms, RMSNorm written with ``torch.pow(·, -0.5)`` and a plain
    weight; RoPE applied before the heads' transpose; a per-head value norm without weight; per-layer inputs
    (their own projection and norm); sliding-window and full-attention layers alternating, the last one full (as
    Gemma 4 requires), the full ones with wider heads."""
    types = (["full_attention", "sliding_attention"] * layers)[:layers][::-1]
    return _decoder(t.Gemma4ForCausalLM, t.Gemma4TextConfig, hidden, layers, num_key_value_heads=2,
                    head_dim=hidden // 4, global_head_dim=hidden // 2, sliding_window=8, layer_types=types,
                    vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=hidden // 4)


def _llama4(t, hidden, layers):
    """Llama 4's text model: RoPE as complex numbers on the [B, L, H, D] view, then a per-head RMSNorm without
    weight (L2Norm), both before the heads' transpose; mixture-of-experts MLPs (2 experts, 1 per token) with a
    shared expert."""
    return _decoder(t.Llama4ForCausalLM, t.Llama4TextConfig, hidden, layers, num_key_value_heads=2,
                    head_dim=hidden // 4, num_local_experts=2, num_experts_per_tok=1,
                    intermediate_size_mlp=2 * hidden, pad_token_id=0)


def _nanochat(t, hidden, layers):
    """RMSNorm without weight everywhere; RoPE with rotate_half's signs swapped, then a per-head norm of q and k
    (no weight) after it; relu² MLP; an embedding norm before the layers."""
    return _decoder(t.NanoChatForCausalLM, t.NanoChatConfig, hidden, layers, num_key_value_heads=2)


def _hunyuan(t, hidden, layers):
    """Llama-like, with a per-head RMSNorm (with weight) of q and k after RoPE (HunYuan-dense's query_layernorm)."""
    return _decoder(t.HunYuanDenseV1ForCausalLM, t.HunYuanDenseV1Config, hidden, layers, num_key_value_heads=2,
                    head_dim=hidden // 4, pad_token_id=0, bos_token_id=0, eos_token_id=0)


def _olmo2(t, hidden, layers):
    """Post-norm residual blocks (x + norm(sublayer(x))) and a full-width q/k norm on the projections' outputs."""
    return _decoder(t.Olmo2ForCausalLM, t.Olmo2Config, hidden, layers, num_key_value_heads=2, pad_token_id=0,
                    bos_token_id=0, eos_token_id=0)


def _qwen3(t, hidden, layers):
    """Llama-like, plus a per-head RMSNorm of q and k before attention (QK-norm)."""
    return _decoder(t.Qwen3ForCausalLM, t.Qwen3Config, hidden, layers, num_key_value_heads=2, head_dim=hidden // 4)


def _qwen3_5(t, hidden, layers):
    """Qwen3.5's text model: Gemma's (1 + w) RMSNorm; linear-attention layers (gated delta rule) and full-attention
    ones whose q projection also computes each head's output gate (chunked apart) and whose per-head q/k norms come
    before a RoPE over the first quarter of each head; the last layer full attention."""
    types = (["linear_attention", "full_attention"] * layers)[-layers:]
    return _decoder(t.Qwen3_5ForCausalLM, t.Qwen3_5TextConfig, hidden, layers, num_key_value_heads=2,
                    head_dim=hidden // 4, layer_types=types, linear_num_key_heads=2, linear_num_value_heads=4,
                    linear_key_head_dim=hidden // 4, linear_value_head_dim=hidden // 4, pad_token_id=0)


def _cohere(t, hidden, layers):
    """Parallel blocks (one LayerNorm feeds attention and the MLP), its LayerNorm written out (two-pass variance,
    no bias), a scaled lm_head."""
    return _decoder(t.CohereForCausalLM, t.CohereConfig, hidden, layers, num_key_value_heads=2, pad_token_id=0,
                    bos_token_id=0, eos_token_id=0)


def _cohere_qk(t, hidden, layers):
    """Cohere with its per-head q/k norms (``use_qk_norm``, Command R+'s): LayerNorms without bias, a weight per
    head ([H, D]), before the interleaved RoPE."""
    return _decoder(t.CohereForCausalLM, t.CohereConfig, hidden, layers, num_key_value_heads=2, pad_token_id=0,
                    bos_token_id=0, eos_token_id=0, use_qk_norm=True)


def _t5(t, hidden, layers):
    return t.T5ForConditionalGeneration, t.T5Config, dict(
        vocab_size=VOCAB, d_model=hidden, d_kv=hidden // 4, d_ff=2 * hidden, num_layers=layers, num_heads=4,
        dropout_rate=0.0)


def _gpt2(t, hidden, layers):
    return t.GPT2LMHeadModel, t.GPT2Config, dict(
        vocab_size=VOCAB, n_embd=hidden, n_layer=layers, n_head=4, n_positions=64, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)


def _bert(t, hidden, layers):
    return t.BertForMaskedLM, t.BertConfig, dict(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
        intermediate_size=2 * hidden, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)


def _vit(t, hidden, layers):
    return t.ViTForImageClassification, t.ViTConfig, dict(
        image_size=32, patch_size=8, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
        intermediate_size=2 * hidden, num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


FAMILIES: dict[str, Callable] = {"llama": _llama, "gemma": _gemma, "gemma2": _gemma2, "gemma3": _gemma3,
                                 "gemma4": _gemma4, "glm4": _glm4, "glm4_moe": _glm4_moe, "hunyuan": _hunyuan,
                                 "llama4": _llama4, "nanochat": _nanochat, "olmo2": _olmo2, "qwen3": _qwen3, "qwen3_5": _qwen3_5,
                                 "cohere": _cohere, "cohere_qk": _cohere_qk, "t5": _t5, "gpt2": _gpt2, "bert": _bert, "vit": _vit}


def tiny_model(family: str, hidden: int = 64, layers: int = 2, **config) -> torch.nn.Module:
    """A randomly initialised ``transformers`` model of ``family`` (one of ``FAMILIES``), in eval mode.
    ``config`` overrides entries of the small config (e.g. ``intermediate_size``, ``max_position_embeddings``)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")
    t = _transformers()
    try:
        model_class, config_class, defaults = FAMILIES[family](t, hidden, layers)
    except AttributeError as e:  # a family newer than the installed transformers
        raise ValueError(f"transformers {t.__version__} has no {family} model ({e})") from e
    return model_class(config_class(**{**defaults, **config})).eval()


def model_from_config(name_or_path: str) -> torch.nn.Module:
    """Any ``transformers`` config (a local path, or a hub id already in the local cache), random weights."""
    t = _transformers()
    config = t.AutoConfig.from_pretrained(name_or_path)
    for auto in (t.AutoModelForCausalLM, t.AutoModelForSeq2SeqLM, t.AutoModel):
        try:
            return auto.from_config(config).eval()
        except ValueError:  # this config has no model of that kind
            continue
    raise ValueError(f"no transformers model class for config {name_or_path!r}")


def example_inputs(model: torch.nn.Module, batch: int = 2, seq: int = 12, seed: int = 1) -> dict:
    """Keyword inputs for ``model(**inputs)``: token ids (decoder ids too for encoder-decoders) or images."""
    t = _transformers()
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    config = model.config
    if getattr(config, "model_type", "") == "vit":
        size = config.image_size
        dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
        images = torch.randn(batch, config.num_channels, size, size, generator=generator)
        return {"pixel_values": images.to(device, dtype)}
    ids = torch.randint(0, min(config.vocab_size, VOCAB), (batch, seq), generator=generator).to(device)
    if isinstance(model, t.PreTrainedModel) and config.is_encoder_decoder:
        return {"input_ids": ids, "decoder_input_ids": ids.flip(1)}
    return {"input_ids": ids}
