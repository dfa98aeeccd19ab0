"""Norm sites of transformers families beyond the tested ones (tests/test_hf_models.py): a tiny random config of
each FAMILY (a transformers model_type with a causal-LM head), compiled with policy always on the CPU, inference;
prints how many norm sites were rewritten (and how many took RoPE or a QK-norm into a q/k projection's epilogue),
the error against eager, and each unfused site's reason. Run it under
the Triton interpreter (the kernels run on the CPU in fp32):

    TRITON_INTERPRET=1 python benchmarks/diagnostics/hf_family_scan.py mistral qwen2 smollm3 ...
    TRITON_INTERPRET=1 python benchmarks/diagnostics/hf_family_scan.py qwen3_next --layer-type full_attention
    TRITON_INTERPRET=1 python benchmarks/diagnostics/hf_family_scan.py mistral --train   # gradients too

The config: hidden 64, 2 layers, 4 heads of 16 (2 key/value heads), intermediate 128, vocabulary 128, and for a
mixture of experts 2 experts, 1 per token — each only where the family's config has that field, in its
sub-configs too (a composite model's text or vision config). A family whose
tiny model cannot be built or run eagerly is reported as skipped with the error.
"""
import argparse
import sys
import traceback

import torch

import norm_fusion_inductor as nfi

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, num_key_value_heads=2, head_dim=16, pad_token_id=0, ffn_dim=128,
            word_embed_proj_dim=64, num_local_experts=2, num_experts=2, n_routed_experts=2, num_experts_per_tok=1,
            moe_intermediate_size=64, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
            q_lora_rank=48, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16)


def _tiny_fields(default, leave_out=(), layer_type: str = "") -> dict:
    """The fields of ``TINY`` that the config ``default`` has (but ``leave_out``), and its sub-configs (a
    composite model's text, vision or audio config) made tiny the same way, as dicts."""
    import transformers

    def has(name):
        try:
            return hasattr(default, name)
        except Exception:  # e.g. a field set per layer
            return False

    fields = {k: v for k, v in TINY.items() if k not in leave_out and has(k)}
    if layer_type and has("layer_types"):
        fields["layer_types"] = [layer_type] * TINY["num_hidden_layers"]
    for name, sub in vars(default).items():  # default-sized inner models filled 24 GB (BLT, dots3_note)
        if isinstance(sub, transformers.PretrainedConfig):
            fields[name] = _tiny_fields(type(sub)(), leave_out, layer_type)
    return fields


def tiny_config(family: str, leave_out=(), layer_type: str = ""):
    """The family's config with the fields of ``TINY`` that it and its sub-configs have (but ``leave_out``) set
    to them; with ``layer_type`` (e.g. "full_attention") every layer of a hybrid family that has per-layer types
    is of it."""
    import transformers

    cls = transformers.AutoConfig.for_model(family).__class__
    return cls(**_tiny_fields(cls(), leave_out, layer_type))


def tiny_model(family: str, layer_type: str = ""):
    """The family's tiny causal LM, eval mode, and its logits for fixed ids; head_dim (a per-layer field) or the
    key/value heads (multi-head latent attention has none of its own) left to the family where setting them fails."""
    import transformers

    ids = torch.randint(1, 128, (2, 12))
    for leave_out in ((), ("head_dim",), ("num_key_value_heads",), ("head_dim", "num_key_value_heads")):
        try:
            model = transformers.AutoModelForCausalLM.from_config(tiny_config(family, leave_out, layer_type)).eval()
            with torch.no_grad():
                return model, ids, model(input_ids=ids, use_cache=False).logits
        except Exception as e:
            error = e
    raise error


def _gradients(model, run, ids) -> tuple:
    """(every parameter's gradient, the logits) of one step of ``run`` under a fixed random output gradient (the
    model stays in eval mode: no dropout to tell two runs apart)."""
    model.zero_grad()
    out = run(input_ids=ids, use_cache=False).logits
    (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(0))).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, out.detach()


def _worst_gradient_error(grads: dict, eager: dict) -> float:
    """max over parameters of ‖g − g_eager‖ / max(‖g_eager‖, 1e-3): the floor for gradients that are 0 in exact
    arithmetic (a router's under one expert per token)."""
    return max(((grads[n] - g).norm() / g.norm().clamp(min=1e-3)).item() for n, g in eager.items())


def _training_errors(model, compiled, ids) -> tuple:
    """(output error, worst gradient error, Inductor default's worst gradient error or None) of a training step
    compiled with the plugin against eager; default's is measured where the plugin's is over 1e-4, to tell the
    plugin's error from Inductor's."""
    fused, out = _gradients(model, compiled, ids)
    eager, ref = _gradients(model, model, ids)
    worst = _worst_gradient_error(fused, eager)
    default = None
    if worst > 1e-4:
        torch._dynamo.reset()
        default = _worst_gradient_error(_gradients(model, torch.compile(model), ids)[0], eager)
    return ((out - ref).norm() / ref.norm()).item(), worst, default


def scan(family: str, layer_type: str = "", train: bool = False) -> str:
    try:
        model, ids, ref = tiny_model(family, layer_type)
    except Exception as e:
        return f"{family}: skipped, the tiny model does not build or run eagerly: {type(e).__name__}: {e}"[:300]
    nfi.clear_reports()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="norm_fusion",
                             options={"norm_fusion": {"policy": "always", "fusions": nfi.KNOWN_FUSIONS}})
    grad_err = default_err = None
    try:
        if train:
            err, grad_err, default_err = _training_errors(model, compiled, ids)
        else:
            with torch.no_grad():
                out = compiled(input_ids=ids, use_cache=False).logits
            err = ((out - ref).norm() / ref.norm()).item()
    except Exception:
        return f"{family}: FAILED to compile or run:\n{traceback.format_exc(limit=-4)}"
    sites = nfi.reports()
    rope, qk = (sum(piece in s.reason for s in sites if s.rewritten) for piece in ("RoPE", "QK-norm"))
    lines = [f"{family}: {sum(s.rewritten for s in sites)} of {len(sites)} rewritten, err {err:.1e}"
             + (f", worst gradient err {grad_err:.1e}" if grad_err is not None else "")
             + (f" (Inductor default: {default_err:.1e})" if default_err is not None else "")
             + f"; sites with RoPE in an epilogue {rope}, with a QK-norm {qk}"]
    lines += [f"   unfused {s.fusion} {s.shape} | {s.reason[:230]}" for s in sites if not s.rewritten]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("families", nargs="+", help="transformers model_type names, e.g. mistral qwen2 phi3")
    ap.add_argument("--layer-type", default="", help="every layer of a hybrid family of this type, e.g. "
                                                     "full_attention (Qwen3-Next's default tiny layers are linear)")
    ap.add_argument("--train", action="store_true", help="a training step instead: the output and every "
                                                            "parameter's gradient against eager's")
    args = ap.parse_args(argv)
    for family in args.families:
        print(scan(family, args.layer_type, args.train), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
