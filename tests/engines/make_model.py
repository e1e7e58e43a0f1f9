"""Build a tiny random-weight Llama and a locally trained tokenizer in DIR (no download).

Runs in the engines venv (transformers + tokenizers): ``python make_model.py DIR``. The weights are
split into several safetensors shards so vLLM prints its real shard-loading progress bar.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
WORDS = """
time year people way day thing world school state family group country problem hand part place
case week company system program question work number night point home water room model token
server engine graph memory batch cache kernel tensor shard weight layer
""".split()  # noqa: SIM905 - reads better as text


def train_tokenizer(out: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(13)
    corpus = [" ".join(rng.choices(WORDS, k=40)) + f" {rng.randint(0, 99999)}" for _ in range(4000)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_model(out: Path, vocab_size: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(13)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="600KB")


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = 4096
    train_tokenizer(out, vocab_size)
    build_model(out, vocab_size)
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    print(f"model in {out}: {len(shards)} shards")
    return 0 if len(shards) > 1 else 1


if __name__ == "__main__":
    sys.exit(main())
