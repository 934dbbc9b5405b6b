"""Tiny random stand-ins for the Qwen models, built offline: `tiny(model_type)` is a 2-layer, hidden-64 model
of that class with random weights (seeded), `tiny_tokenizer()` a word-level tokenizer built in code with a
ChatML chat template; a qwen3 model's template has Qwen3's thinking switch (enable_thinking false: an empty
think block opens the reply). The tests and `qwen.tiny: true` run the whole Qwen sub-DAG with them."""

from __future__ import annotations

import torch

from vlbind.qwen.models import CLASSES
from vlbind.qwen.words import BOX_OBJECTS, CITIES, COLOR_WORDS, FOODS, ITEM_WORDS, NAMES, SHAPE_WORDS

CONFIGS = {"qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "qwen2_vl": "Qwen2VLConfig",
           "qwen2_5_vl": "Qwen2_5_VLConfig", "qwen3_vl": "Qwen3VLConfig"}
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Qwen3's generation prompt: its template ends the same way
QWEN3_CHATML = CHATML.replace("{% endif %}", "{% if enable_thinking is defined and enable_thinking is false %}"
                                             "<think>\n\n</think>\n\n{% endif %}{% endif %}")


def tiny_tokenizer(model_type: str = "qwen2"):
    """A word-level tokenizer over the prompts' vocabulary, with ChatML specials and `model_type`'s template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ("Context Question In what city does live Where the person that likes Answer with just name City lives "
             "in is liked by You are a helpful assistant system user assistant the The and is Box Which box "
             "Associations item goes shape Respond one word only answer nothing else a").split()
    specials = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    symbols = list(". , ? : ! ' \"".split()) + ["\n"] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    pools = list(NAMES + CITIES + FOODS + BOX_OBJECTS + COLOR_WORDS + SHAPE_WORDS + ITEM_WORDS)
    vocab = {w: i for i, w in enumerate(dict.fromkeys(specials + symbols + words + pools))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", additional_special_tokens=specials[2:])
    tok.chat_template = QWEN3_CHATML if model_type == "qwen3" else CHATML
    return tok


def tiny(model_type: str, seed: int = 0):
    """(model, tokenizer): a tiny random model of `model_type`'s class (2 layers, hidden 64), seeded."""
    import transformers

    if model_type not in CLASSES:
        raise ValueError(f"unknown Qwen model_type {model_type!r}; valid: {sorted(CLASSES)}")
    tok = tiny_tokenizer(model_type)
    text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, bos_token_id=None,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    config_cls = getattr(transformers, CONFIGS[model_type])
    if model_type.endswith("_vl"):
        rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}  # sums to head_dim / 2
        config = config_cls(text_config={**text, "rope_parameters": rope},
                            vision_config=dict(depth=1, embed_dim=32, hidden_size=64, out_hidden_size=64, num_heads=2))
    else:
        config = config_cls(**text)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, CLASSES[model_type])(config)
    return model.eval(), tok
