"""``python -m norm_fusion_inductor explain``: a tiny HF family or a transformers config on disk; table and JSON."""

import json

import pytest
import torch

pytest.importorskip("transformers")

from norm_fusion_inductor.__main__ import main  # noqa: E402


def test_explain_family_prints_table_and_writes_json(tmp_path, capsys):
    """llama's five norms (two per layer and the final one) are pre-norm RMSNorm sites, all taken by the default
    family, regrouped normalization; the table and the JSON list the same sites."""
    out = tmp_path / "sites.json"
    assert main(["explain", "llama", "--policy", "always", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "5 of 5 normalization sites rewritten" in text and "compile + first run with norm_fusion" in text
    data = json.loads(out.read_text())
    assert data["model"] == "llama" and len(data["sites"]) == 5
    assert all(s["rewritten"] and s["fusion"] == "regrouped_norm" and s["pattern"].startswith("hf_llama/")
               for s in data["sites"]), data["sites"]
    assert all(f"| {s['graph']} | {s['kind']} | {s['pattern']} | {s['node']} |" in text for s in data["sites"]), text
    torch._dynamo.reset()


def test_explain_config_from_disk_in_training(tmp_path, capsys):
    from norm_fusion_inductor import hf_models

    hf_models.tiny_model("gpt2").config.save_pretrained(tmp_path)
    assert main(["explain", "--config", str(tmp_path), "--train", "--policy", "never"]) == 0
    text = capsys.readouterr().out
    assert "training" in text and "0 of 5 normalization sites" in text and "policy=never" in text
    assert "norm in the epilogues of the GEMMs around it" in text and "layer_norm" in text  # regrouped, LayerNorm
    torch._dynamo.reset()


def test_explain_compare_compile(capsys):
    assert main(["explain", "gpt2", "--policy", "never", "--layers", "1", "--compare-compile"]) == 0
    text = capsys.readouterr().out
    assert "pattern tracing (once per process)" in text and "torch.compile default" in text
    torch._dynamo.reset()


def test_explain_needs_exactly_one_model():
    with pytest.raises(SystemExit):
        main(["explain"])
    with pytest.raises(SystemExit):
        main(["explain", "llama", "--config", "x"])
    with pytest.raises(SystemExit):
        main(["explain", "not-a-family"])
