"""Direct and Indirect Retrieval prompts for pretrained LLMs and VLMs (paper, section 2 and appendix B), and
the scoring rule.

    Direct:   Context: James lives in Tokyo. Mary lives in Paris. ... Question: In what city does Mary live?
    Indirect: Context: Banana is liked by James. Orange is liked by Mary. ... James lives in Tokyo. Mary lives
              in Paris. ... Question: Where does the person that likes Orange live? Answer with just the city
              name. City:

Each name, city and food appears once per context; both parts of an Indirect context list the people in the
same order (as the paper's example). For each context length, `contexts_per_length` contexts are drawn and
every person is queried once. What the paper leaves open is a PromptConfig field marked [assumption].

Scoring (appendix B, "whether the model's generated output contained the correct city name"): a `<think>`
block (Qwen3's thinking mode) is removed first, an unclosed one up to the end; then the city must occur as a
whole word, case-insensitively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..settings import from_dict
from .words import CITIES, FOODS, NAMES

TASKS = ("direct", "indirect")


@dataclass(frozen=True)
class PromptConfig:
    context_lengths: tuple[int, ...] = (10, 25, 50, 75, 100)  # [assumption] lost from the paper's text
    contexts_per_length: int = 10  # [paper] 10 independent contexts per length
    likes_first: bool = True  # [assumption] Indirect part order: the paper's example has "is liked by" first,
    # its text the other way round
    system_prompt: str = "You are a helpful assistant."  # [paper] passed explicitly to the chat template
    seed: int = 0

    def __post_init__(self) -> None:
        pool = min(len(NAMES), len(CITIES), len(FOODS))
        if not self.context_lengths or min(self.context_lengths) < 1 or max(self.context_lengths) > pool:
            raise ValueError(f"PromptConfig.context_lengths={self.context_lengths}: each must lie in 1..{pool} "
                             "(the word pools in vlbind/qwen/words.py)")
        if self.contexts_per_length < 1:
            raise ValueError(f"PromptConfig.contexts_per_length={self.contexts_per_length} must be >= 1")

    @classmethod
    def from_dict(cls, d: dict) -> PromptConfig:
        d = dict(d)
        if "context_lengths" in d:
            d["context_lengths"] = tuple(d["context_lengths"])
        return from_dict(cls, d)


@dataclass(frozen=True)
class RetrievalPrompt:
    task: str  # "direct" or "indirect"
    n_pairs: int
    context: int  # which of the contexts of this length
    query_position: int  # index of the queried person in the context
    text: str  # the user message
    answer: str  # the city


def direct_text(names, cities, query: int) -> str:
    facts = " ".join(f"{n} lives in {c}." for n, c in zip(names, cities))
    return f"Context: {facts} Question: In what city does {names[query]} live?"


def indirect_text(names, cities, foods, query: int, likes_first: bool = True) -> str:
    likes = " ".join(f"{f} is liked by {n}." for f, n in zip(foods, names))
    lives = " ".join(f"{n} lives in {c}." for n, c in zip(names, cities))
    parts = f"{likes} {lives}" if likes_first else f"{lives} {likes}"
    return (f"Context: {parts} Question: Where does the person that likes {foods[query]} live? "
            "Answer with just the city name. City:")


def prompts(cfg: PromptConfig, task: str) -> list[RetrievalPrompt]:
    """Every prompt of `task`: for each context length, cfg.contexts_per_length contexts, each person queried
    once. The draws depend only on (seed, task, length, context)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; valid: {TASKS}")
    out = []
    for n in cfg.context_lengths:
        for k in range(cfg.contexts_per_length):
            rng = np.random.default_rng([cfg.seed, TASKS.index(task), n, k])
            names, cities, foods = ([pool[i] for i in rng.permutation(len(pool))[:n]]
                                    for pool in (NAMES, CITIES, FOODS))
            for q in range(n):
                text = (direct_text(names, cities, q) if task == "direct"
                        else indirect_text(names, cities, foods, q, cfg.likes_first))
                out.append(RetrievalPrompt(task, n, k, q, text, cities[q]))
    return out


def messages(text: str, system_prompt: str) -> list[dict]:
    """The chat the model's template formats: the system prompt, then `text` as the user's turn (every Qwen
    analysis prompts this way)."""
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": text}]


def chat_text(tokenizer, text: str, system_prompt: str, **template) -> str:
    """The model's chat template applied to `messages`, ending where the assistant's reply begins; `template`
    goes to apply_chat_template (e.g. Qwen3's enable_thinking)."""
    return tokenizer.apply_chat_template(messages(text, system_prompt), add_generation_prompt=True, tokenize=False,
                                         **template)


_THINK = re.compile(r"<think>.*?(</think>|\Z)", flags=re.DOTALL)


def is_correct(output: str, answer: str) -> bool:
    """Whether `output` names `answer` as a whole word (case-insensitive), outside any <think> block."""
    visible = _THINK.sub(" ", output)
    return re.search(rf"\b{re.escape(answer)}\b", visible, flags=re.IGNORECASE) is not None
