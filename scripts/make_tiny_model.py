"""Make a small random-weight Llama model, with its own tokenizer, for a local vLLM to serve.

No model hub is reachable from the machines sweeper is tested on, so the model the tests and the
demo serve is made here: a byte-level BPE tokenizer trained with ``tokenizers`` on text generated
from a seeded word list, a ChatML chat template, and a ``LlamaForCausalLM`` with seeded random
weights saved as float32 safetensors. Same seed, same files.

Two sizes:

- ``tiny`` (default): hidden 256, 4 layers, ~3.8 M parameters, ~15 MB. Fast: the tests' server.
- ``small``: hidden 768, 6 layers, 44 M parameters, ~176 MB. Its prefill is slow enough on a CPU that a small
  ``--max-num-batched-tokens`` makes decoding streams stall while other requests prefill
  (chunked-prefill interference, the ITL tail of the reference report).

Run it with the vLLM environment's Python (it has torch, transformers and tokenizers)::

    .venv-vllm/bin/python scripts/make_tiny_model.py --out .models/tiny
    .venv-vllm/bin/python scripts/make_tiny_model.py --size small --out .models/small

An existing model folder whose ``sweeper_model.json`` matches is left alone (use ``--force``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parents[1] / ".models"
SEED = 20260101
VOCAB_SIZE = 4096
TRAINING_LINES = 12000
WORDS_PER_LINE = (6, 30)
MAX_POSITIONS = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
STAMP_FILE = "sweeper_model.json"
STAMP_VERSION = 2


@dataclass(frozen=True)
class ModelShape:
    """The architecture of one model size."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


SHAPES = {
    "tiny": ModelShape(256, 4, 4, 2, 512),
    "small": ModelShape(768, 6, 12, 4, 2048),
}

# Words the generated training text is made of: everyday English (so a prompt of ordinary words
# costs about one token a word, as with real tokenizers), serving jargon, a little Chinese, digits
# and code-ish identifiers, so any prompt text tokenizes sensibly.
_WORD_TEXT = (
    "the of and to in is that for it as with was on be by this are from at or an have not "
    "he she they we you his her their our your its who what when where which why how all "
    "would there can will said could about would up out if into just do did done make made "
    "know take see come think look want give use find tell ask work seem feel try leave call "
    "good new old great big small long little own other right same different large young "
    "important public bad able early late hard real best better sure free full whole "
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question "
    "government number night point home water room mother area money story fact month lot "
    "study book eye job word business issue side kind house service friend father power hour "
    "game end member law car city community name president team minute idea kid body "
    "information back parent face others office door health person art war history party "
    "result change morning reason research girl guy moment air teacher force education foot "
    "boy age policy music market sense nation plan college interest death experience effect "
    "class control care field development role effort heart drug show leader light voice "
    "wife police mind report decision son view relationship town road table street river "
    "server request token latency throughput batch queue cache memory prefill decode stream "
    "model weight layer head block page tensor kernel engine scheduler sequence prompt output "
    "input length budget chunk level sweep finding knee ceiling tail preemption running "
    "waiting usage metric histogram bucket counter gauge second millisecond gigabyte bandwidth "
    "fast slow high low more less first last next every each some many few one two three four "
    "rate speed cost price value limit curve line chart site language "
    "请求 延迟 吞吐 并发 缓存 内存 模型 令牌 报告 曲线 服务器 队列 解码 预填充"
)
_WORDS = _WORD_TEXT.split()
_PUNCT = [".", ",", ";", ":", "?", "!", "(", ")", "-", "/", "=", "'", '"']


def generate_corpus(rng: random.Random) -> list[str]:
    """Seeded pseudo-text: words, numbers, punctuation and some identifiers."""
    lines = []
    for _ in range(TRAINING_LINES):
        parts = []
        for _ in range(rng.randint(*WORDS_PER_LINE)):
            roll = rng.random()
            if roll < 0.75:
                parts.append(rng.choice(_WORDS))
            elif roll < 0.85:
                parts.append(str(rng.randint(0, 99999)))
            elif roll < 0.93:
                parts.append(rng.choice(_PUNCT))
            else:
                parts.append("_".join(rng.sample(_WORDS[:40], 2)))
        lines.append(" ".join(parts))
    return lines


def build_tokenizer(out: Path, rng: random.Random) -> int:
    """Train and save the tokenizer; return its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(generate_corpus(rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(out)
    return int(tokenizer.get_vocab_size())


def build_model(out: Path, shape: ModelShape, vocab_size: int, bos_id: int, eos_id: int) -> int:
    """Create and save the random-weight model; return its parameter count."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=bos_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=bos_id, do_sample=False
    )
    model.save_pretrained(out, safe_serialization=True)
    return int(sum(p.numel() for p in model.parameters()))


def make_model(out: Path, size: str, force: bool = False) -> Path:
    """Create the model folder ``out`` (skipped when an identical one is already there)."""
    shape = SHAPES[size]
    wanted = {"stamp_version": STAMP_VERSION, "size": size, "seed": SEED, **asdict(shape)}
    stamp = out / STAMP_FILE
    if not force and stamp.exists():
        try:
            if json.loads(stamp.read_text())["spec"] == wanted:
                stamp.touch()  # newer than this script: make sees it is up to date
                print(f"{out}: already made ({size}); --force to remake")
                return out
        except (ValueError, KeyError):
            pass
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    vocab_size = build_tokenizer(out, rng)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    parameters = build_model(out, shape, vocab_size, tok.bos_token_id, tok.eos_token_id)
    stamp.write_text(
        json.dumps({"spec": wanted, "parameters": parameters, "vocab_size": vocab_size}, indent=2)
    )
    print(f"{out}: {size} model, {parameters:,} parameters, vocabulary {vocab_size}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=None, help="model folder (default: .models/<size> in the repo)"
    )
    parser.add_argument("--size", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--force", action="store_true", help="remake even if already there")
    args = parser.parse_args(argv)
    out = args.out or MODELS_DIR / args.size
    make_model(out, args.size, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
