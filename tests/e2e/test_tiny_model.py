"""The tiny model is made, not downloaded: the same seed must give the same bytes, and the
tokenizer must cost about a token per ordinary word (as real ones do), with a chat template."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SCRIPT = ROOT / "scripts" / "make_tiny_model.py"
COMPARED = ("model.safetensors", "tokenizer.json", "config.json", "generation_config.json")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_same_bytes(
    tmp_path: Path, vllm_model: Callable[[str], Path], vllm_python: Path
) -> None:
    made = vllm_model("tiny")
    python = str(vllm_python)
    out = tmp_path / "tiny"
    subprocess.run([python, str(SCRIPT), "--out", str(out)], check=True, capture_output=True)
    assert json.loads((out / "sweeper_model.json").read_text()) == json.loads(
        (made / "sweeper_model.json").read_text()
    )
    for name in COMPARED:
        assert digest(out / name) == digest(made / name), name


def test_tokenizer_counts_words_and_applies_chatml(
    vllm_model: Callable[[str], Path], vllm_python: Path
) -> None:
    made = vllm_model("tiny")
    probe = (
        "from transformers import AutoTokenizer\n"
        "import json, sys\n"
        f"tok = AutoTokenizer.from_pretrained({str(made)!r})\n"
        "text = 'the people of the city said the report was good for the company this year'\n"
        "chat = tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False,\n"
        "                               add_generation_prompt=True)\n"
        "print(json.dumps({'words': len(text.split()), 'tokens': len(tok(text)['input_ids']),\n"
        "                  'chat': chat, 'eos': tok.eos_token}))\n"
    )
    done = subprocess.run(
        [str(vllm_python), "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tokens"] == found["words"]
    assert found["chat"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert found["eos"] == "<|im_end|>"
