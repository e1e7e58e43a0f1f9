"""A small tokenizer.json made in the test (no download): a byte-level BPE trained on made-up
words, optionally with a post-processor that adds a BOS to every prompt, as Llama's does (the
special token vLLM's random dataset leaves room for)."""

from __future__ import annotations

import random
from pathlib import Path


def write_tokenizer(folder: Path, bos: bool = True) -> Path:
    """``folder/tokenizer.json``; returns the file."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=rng.randint(2, 7))) for _ in range(300)]
    corpus = [" ".join(rng.choices(vocab, k=30)) for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "tokenizer.json"
    tok.save(str(file))
    return file
