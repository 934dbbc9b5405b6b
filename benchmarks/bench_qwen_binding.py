"""The Qwen boxes-task layer sweep (vlbind.qwen.binding.interchange): the cached-prefix batch (the prompt's prefix
once, then one batch of last-token runs: unpatched + one per layer) vs one full forward pass per patched layer
(as Gur-Arieh et al.'s tasks/dist.py runs it, a fresh counterfactual forward per layer aside), on a random
Qwen2-class model of the given size, with the tiny word-level tokenizer. Prints pairs/s both ways and whether
the labels agree; asserts nothing.

    python benchmarks/bench_qwen_binding.py [--layers 12] [--hidden 256] [--entries 20] [--pairs 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch
import transformers

from vlbind.qwen.binding import (
    chat_ids,
    full_forward_patched,
    label_of,
    last_stream,
    letter_ids,
    make_pairs,
    patched_last_logits,
)
from vlbind.qwen.models import decoder_layers
from vlbind.qwen.prompts import Chat
from vlbind.qwen.tiny import tiny_tokenizer

CHAT = Chat(system_prompt=None)


def model_of_size(tok, layers: int, hidden: int):
    config = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=4 * hidden,
                                      num_hidden_layers=layers, num_attention_heads=hidden // 32,
                                      num_key_value_heads=max(1, hidden // 128), max_position_embeddings=4096,
                                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).eval()


def sweep(model, tok, pairs, cached: bool):
    labels, n_layers = [], len(decoder_layers(model))
    for pair in pairs:
        ids = chat_ids(tok, pair.original, CHAT)
        cf = last_stream(model, chat_ids(tok, pair.counterfactual, CHAT))
        if cached:
            logits = patched_last_logits(model, ids, list(range(n_layers)), cf)
        else:
            logits = torch.stack([full_forward_patched(model, ids, layer, cf[layer]) for layer in range(n_layers)])
        candidates = letter_ids(tok, pair.letters)
        labels += [label_of(pair.letters[int(row[candidates].argmax())], pair.predictions) for row in logits]
    return labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--entries", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = tiny_tokenizer()
    model = model_of_size(tok, args.layers, args.hidden)
    pairs = make_pairs(args.entries, args.pairs, seed=0)
    print(f"Qwen2-class random model: {args.layers} layers, hidden {args.hidden}; {args.entries} boxes "
          f"({chat_ids(tok, pairs[0].original, CHAT).shape[1]} tokens); {args.pairs} pairs; {args.threads} thread(s)")
    sweep(model, tok, pairs[:2], True)  # warm-up
    results = {}
    for name, cached in (("one full forward per layer", False), ("cached prefix, layers batched", True)):
        t0 = time.perf_counter()
        results[name] = sweep(model, tok, pairs, cached)
        dt = time.perf_counter() - t0
        print(f"{name:32s} {args.pairs / dt:8.2f} pairs/s  ({dt:.2f} s)")
    a, b = results.values()
    print(f"labels agree on {sum(x == y for x, y in zip(a, b))} of {len(a)} (pair, layer) cells")


if __name__ == "__main__":
    main()
