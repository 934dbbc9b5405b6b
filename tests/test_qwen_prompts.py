"""Retrieval prompts for pretrained models (vlbind.qwen.prompts): answers re-derived by an independent parser
of each prompt's text, the paper's wording, word pools, and the scoring rule."""

import re
from collections import Counter

import pytest

from vlbind.qwen.prompts import Chat, PromptConfig, RetrievalPrompt, is_correct, prompts
from vlbind.qwen.words import CITIES, FOODS, NAMES

CFG = PromptConfig(context_lengths=(3, 12), contexts_per_length=4)


def parse(text: str) -> str:
    """The city a prompt asks for, read from its sentences alone."""
    lives = dict(re.findall(r"(\w+) lives in (\w+)\.", text))
    if m := re.search(r"In what city does (\w+) live\?", text):
        return lives[m.group(1)]
    liked = {food: name for food, name in re.findall(r"(\w+) is liked by (\w+)\.", text)}
    return lives[liked[re.search(r"the person that likes (\w+) live\?", text).group(1)]]


@pytest.mark.parametrize("task", ["direct", "indirect"])
def test_every_answer_is_rederived_from_the_prompt_text(task):
    ps = prompts(CFG, task)
    assert len(ps) == 4 * (3 + 12)
    for p in ps:
        assert parse(p.text) == p.answer


@pytest.mark.parametrize("task", ["direct", "indirect"])
def test_each_word_once_per_context_and_every_position_queried(task):
    ps = prompts(CFG, task)
    for (n, k) in {(p.n_pairs, p.context) for p in ps}:
        mine = [p for p in ps if (p.n_pairs, p.context) == (n, k)]
        assert sorted(p.query_position for p in mine) == list(range(n))
        words = Counter(re.findall(r"\w+", mine[0].text.split("Question:")[0]))
        for pool in (NAMES, CITIES) + ((FOODS,) if task == "indirect" else ()):
            used = [w for w in words if w in pool]
            assert len(used) == n and all(words[w] == (2 if pool is NAMES and task == "indirect" else 1) for w in used)


def test_the_papers_wording():
    direct = prompts(PromptConfig(context_lengths=(2,), contexts_per_length=1), "direct")[0].text
    assert re.fullmatch(r"Context: \w+ lives in \w+\. \w+ lives in \w+\. "
                        r"Question: In what city does \w+ live\?", direct)
    indirect = prompts(PromptConfig(context_lengths=(2,), contexts_per_length=1), "indirect")[0].text
    assert re.fullmatch(r"Context: \w+ is liked by \w+\. \w+ is liked by \w+\. \w+ lives in \w+\. \w+ lives in \w+\. "
                        r"Question: Where does the person that likes \w+ live\? Answer with just the city name\. City:",
                        indirect)
    flipped = prompts(PromptConfig(context_lengths=(2,), contexts_per_length=1, likes_first=False), "indirect")[0]
    assert flipped.text.index("lives in") < flipped.text.index("is liked by")


def test_prompts_are_deterministic_and_contexts_differ():
    a, b = prompts(CFG, "indirect"), prompts(CFG, "indirect")
    assert a == b
    assert len({p.text.split("Question:")[0] for p in a if p.n_pairs == 12}) == 4


def test_word_pools_are_disjoint_and_no_city_hides_in_another_word():
    assert len(set(NAMES) | set(CITIES) | set(FOODS)) == len(NAMES) + len(CITIES) + len(FOODS)
    for city in CITIES:
        assert not any(city.lower() in w.lower() for w in NAMES + FOODS + CITIES if w != city)


def test_scoring_finds_the_city_as_a_word_outside_think_blocks():
    assert is_correct("John lives in Mumbai.", "Mumbai") and is_correct("mumbai", "Mumbai")
    assert not is_correct("Mumbaikar", "Mumbai")
    assert not is_correct("<think>Maybe Mumbai?</think> Paris", "Mumbai")
    assert is_correct("<think>Maybe Paris?</think>\n\nMumbai", "Mumbai")
    assert not is_correct("<think>Mumbai, or maybe", "Mumbai")  # thinking never ended: no answer given


def test_messages_carry_the_default_system_prompt_or_none():
    p = RetrievalPrompt("direct", 1, 0, 0, "Context: A lives in B. Question: In what city does A live?", "B")
    assert Chat().messages(p.text) == [{"role": "system", "content": "You are a helpful assistant."},
                                       {"role": "user", "content": p.text}]
    assert Chat(system_prompt=None).messages(p.text) == [{"role": "user", "content": p.text}]


def test_the_indirect_parts_list_people_in_independent_orders():
    def people(text, pattern):
        return re.findall(pattern, text.split("Question:")[0])

    def same_order(cfg):
        ps = [p for p in prompts(cfg, "indirect") if p.query_position == 0]
        return [people(p.text, r"is liked by (\w+)\.") == people(p.text, r"(\w+) lives in") for p in ps]

    assert all(same_order(PromptConfig(context_lengths=(8,), contexts_per_length=10, shuffle_people=False)))
    assert sum(same_order(PromptConfig(context_lengths=(8,), contexts_per_length=10))) <= 1


def test_bad_prompt_config_names_the_key():
    with pytest.raises(ValueError, match="context_lengths"):
        PromptConfig(context_lengths=(500,))
    with pytest.raises(ValueError, match="unknown PromptConfig keys"):
        PromptConfig.from_dict({"lengths": [3]})
    assert PromptConfig.from_dict({"context_lengths": [3, 4]}).context_lengths == (3, 4)
