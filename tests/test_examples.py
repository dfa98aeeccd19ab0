"""The README's main command runs on this machine and checks itself against eager and float64."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_runs():
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True,
                            text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rel. error vs float64" in result.stdout
    assert result.stdout.count("REWRITTEN") == 2 or "cuda" in result.stdout, result.stdout


def _run_example(name, *args):
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    result = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                            env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_llama_training_step_runs():
    pytest.importorskip("transformers")
    out = _run_example("llama_training_step.py", "--hidden", "64", "--layers", "1", "--seq", "16")  # the interpreter
    assert "max rel. gradient error vs eager" in out
    assert out.count("REWRITTEN") == 3 or "cuda" in out, out  # CPU: every site (2 + the final norm), regrouped


def test_bert_inference_runs():
    pytest.importorskip("transformers")
    out = _run_example("bert_inference.py", "--batch", "2", "--seq", "16")  # small: the interpreter
    assert "rel. error vs eager" in out and "normalization sites rewritten" in out


def test_recsys_block_runs():
    out = _run_example("recsys_block.py")
    assert "training step, rel. error vs eager" in out and "jagged rows" in out
    assert "LayerNorm → attention → RMSNorm" in out and "| yes |" in out, out


