"""Norm sites of transformers families beyond the tested ones (tests/test_hf_models.py): a tiny random config of
FAMILY (a transformers model_type), compiled with policy always on the CPU, inference; prints how many norm sites
were rewritten, the error against eager, and each unfused site's reason.

    python benchmarks/diagnostics/hf_family_scan.py mistral     # also qwen2, phi3, starcoder2, stablelm, cohere, ...
"""
import sys, time, torch, transformers as t
import norm_fusion_inductor as nfi
fam = sys.argv[1]
base = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64)
extra = {
  "mistral": dict(num_key_value_heads=2), "qwen2": dict(num_key_value_heads=2), "phi3": dict(num_key_value_heads=2, pad_token_id=0),
  "starcoder2": dict(num_key_value_heads=2), "stablelm": dict(num_key_value_heads=2), "cohere": dict(num_key_value_heads=2),
  "granite": dict(num_key_value_heads=2), "olmo": dict(num_key_value_heads=2, pad_token_id=0), "phi": dict(),
  "gpt_neox": dict(), "opt": dict(ffn_dim=128, word_embed_proj_dim=64, enable_bias=True), "mixtral": dict(num_key_value_heads=2, num_local_experts=2, num_experts_per_tok=1),
  "qwen3_moe": dict(num_key_value_heads=2, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=64, head_dim=16),
  "falcon": dict(), "gemma3_text": dict(num_key_value_heads=2, head_dim=16),
  "gemma2": dict(num_key_value_heads=2, head_dim=16), "olmo2": dict(num_key_value_heads=2, pad_token_id=0),
}[fam]
cfg = t.AutoConfig.for_model(fam, **base, **extra)
model = t.AutoModelForCausalLM.from_config(cfg).eval()
ids = torch.randint(0, 128, (2, 12))
nfi.clear_reports(); torch._dynamo.reset()
m = torch.compile(model, backend="norm_fusion", options={"norm_fusion": {"policy": "always", "fusions": nfi.KNOWN_FUSIONS}})
with torch.no_grad():
    out = m(input_ids=ids).logits
    ref = model(input_ids=ids).logits
err = ((out - ref).norm() / ref.norm()).item()
rs = nfi.reports()
print(f"{fam}: {sum(s.rewritten for s in rs)} of {len(rs)} rewritten, err {err:.1e}")
for s in rs:
    if not s.rewritten:
        print("   unfused", s.fusion, s.shape, "|", s.reason[:230])
