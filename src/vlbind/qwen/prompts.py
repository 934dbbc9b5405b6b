"""Direct and Indirect Retrieval prompts for pretrained LLMs and VLMs (paper, section 2 and appendix B), and
the scoring rule.

    Direct:   Context: James lives in Tokyo. Mary lives in Paris. ... Question: In what city does Mary live?
    Indirect: Context: Banana is liked by James. Orange is liked by Mary. ... James lives in Tokyo. Mary lives
              in Paris. ... Question: Where does the person that likes Orange live? Answer with just the city
              name. City:

Each name, city and food appears once per context. The two parts of an Indirect context list the people in
independent orders (`shuffle_people`): listed in the same order, as in the paper's two-person example, the
food's position would give the city's without reading the names, a positional shortcut the paper's text ("the
index links a food to a city through the same person") does not intend. For each context length,
`contexts_per_length` contexts are drawn and every person is queried once. What the paper leaves open is a
PromptConfig field marked [assumption].

Every Qwen analysis (retrieval, binding, probes) renders its prompt with one `Chat`: the system prompt and
Qwen3's thinking switch (the chat template's enable_thinking), config key qwen.chat.

Scoring (appendix B, "whether the model's generated output contained the correct city name"): a `<think>`
block (Qwen3's thinking mode) is removed first, an unclosed one up to the end; then the city must occur as a
whole word, case-insensitively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from vlbind.core.settings import config_defaults, from_dict
from vlbind.qwen.words import CITIES, FOODS, NAMES

TASKS = ("direct", "indirect")


@dataclass(frozen=True)
@config_defaults("qwen.prompts")
class PromptConfig:
    context_lengths: tuple[int, ...]  # association pairs per context
    contexts_per_length: int  # independent contexts per length
    likes_first: bool  # Indirect part order: the paper's example has "is liked by" first,
    # its text the other way round
    shuffle_people: bool  # the second part lists the people in an independent order
    seed: int

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


def indirect_text(names, cities, foods, query: int, likes_first: bool = True, second_order=None) -> str:
    """Person i likes foods[i] and lives in cities[i]; the second part lists them in `second_order` (default:
    the first part's order)."""
    order = range(len(names)) if second_order is None else second_order
    likes = [f"{f} is liked by {n}." for f, n in zip(foods, names)]
    lives = [f"{n} lives in {c}." for n, c in zip(names, cities)]
    first, second = (likes, lives) if likes_first else (lives, likes)
    parts = " ".join(first + [second[i] for i in order])
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
            second = [int(i) for i in rng.permutation(n)] if cfg.shuffle_people else None
            for q in range(n):
                text = (direct_text(names, cities, q) if task == "direct"
                        else indirect_text(names, cities, foods, q, cfg.likes_first, second))
                out.append(RetrievalPrompt(task, n, k, q, text, cities[q]))
    return out


@dataclass(frozen=True)
@config_defaults("qwen.chat")
class Chat:
    """How every Qwen analysis renders a prompt: config key qwen.chat."""

    system_prompt: str | None  # None: no system turn (the template may add its own default)
    thinking: bool | None  # Qwen3's thinking mode (its template's enable_thinking); None: no flag passed, each
    # template's default (the binding prompt: binding.their_chat)

    @classmethod
    def from_dict(cls, d: dict) -> Chat:
        return from_dict(cls, d)

    def messages(self, text: str) -> list[dict]:
        """The system prompt (if any), then `text` as the user's turn."""
        system = [] if self.system_prompt is None else [{"role": "system", "content": self.system_prompt}]
        return [*system, {"role": "user", "content": text}]

    def render(self, tokenizer, text: str) -> str:
        """The model's chat template applied to `messages`, ending where the assistant's reply begins; the
        thinking switch, unless None, goes to every template (only Qwen3's reads it)."""
        flag = {} if self.thinking is None else {"enable_thinking": self.thinking}
        return tokenizer.apply_chat_template(self.messages(text), add_generation_prompt=True, tokenize=False, **flag)


_THINK = re.compile(r"<think>.*?(</think>|\Z)", flags=re.DOTALL)


def is_correct(output: str, answer: str) -> bool:
    """Whether `output` names `answer` as a whole word (case-insensitive), outside any <think> block."""
    visible = _THINK.sub(" ", output)
    return re.search(rf"\b{re.escape(answer)}\b", visible, flags=re.IGNORECASE) is not None
