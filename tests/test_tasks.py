"""Task generators: every answer recomputed from the prompt text; stage constraints; noise layout."""

from dataclasses import replace

import numpy as np
import pytest

from vlbind.tasks import BY_COLOR, BY_SHAPE, GROUNDING, LOOKUP, RETRIEVAL, SOLO, Role, StageSpec, generate, prompt_text
from vlbind.vocab import VOCAB

CURRICULUM = {
    "text_s1": StageSpec(8, 8, 8, 2, 2, shuffle=False, symmetric_fraction=0.5),
    "text_s2": StageSpec(216, 216, 8, 2, 2, shuffle=False, symmetric_fraction=0.5),
    "text_s3": StageSpec(216, 216, 8, 2, 8, shuffle=False, symmetric_fraction=0.5),
    "text_s4": StageSpec(216, 216, 8, 2, 8, shuffle=True, symmetric_fraction=0.5),
    "text_s5": StageSpec(216, 216, 32, 2, 8, shuffle=True, symmetric_fraction=0.5),
    "noise_text": StageSpec(216, 216, 32, 2, 8, shuffle=True, symmetric_fraction=0.5, noise_tokens=100,
                            noise_fraction=0.5),
    "mixed_tasks": StageSpec(216, 216, 32, 2, 8, grounding_fraction=0.5, symmetric_fraction=0.5),
    "one_hop_practice": StageSpec(216, 216, 8, 2, 8, symmetric_fraction=0.5, hop_fraction=0.6),
    "solo_practice": StageSpec(216, 216, 8, 2, 8, symmetric_fraction=0.5, hop_fraction=0.4, solo_fraction=0.5,
                               noise_tokens=100, noise_fraction=0.5),
    "position_jumps": StageSpec(216, 216, 8, 2, 8, grounding_fraction=0.3, symmetric_fraction=0.5, hop_fraction=0.3,
                                solo_fraction=0.3, noise_tokens=100, noise_fraction=0.5, jump_max=8),
}


def solve(text: str) -> str:
    """Answer a prompt from its text alone, the way the paper defines the task (appendix C)."""
    toks = [t for t in text.split() if t != "[NOISE]"]
    end = toks.index("[CONTEXTEND]")
    context = toks[:end]
    pairs = list(zip(context[0::2], context[1::2]))
    assert all(c.startswith("color") and s.startswith("shape") for c, s in pairs)
    assert toks[-3] == "[QUESTION]" and toks[-1] == "[ANSWER]"
    query = toks[-2]
    if query.startswith("color"):
        (entity,) = [s for c, s in pairs if c == query]
    else:
        (entity,) = [c for c, s in pairs if s == query]
    middle = toks[end + 1 : -3]
    if not middle:  # feature grounding
        return entity
    entries = " ".join(middle).split(" [SEP] ")
    assoc = dict(e.split() for e in entries)
    # one entry per context pair; a solo context (one pair) keeps the entries of the objects it leaves out
    assert len(assoc) == len(pairs) or (len(pairs) == 1 and entity in assoc)
    if query in assoc:  # association lookup: the query is itself an association key
        return assoc[query]
    return assoc[entity]


@pytest.mark.parametrize("stage", list(CURRICULUM))
@pytest.mark.parametrize("materialize", [False, True])
def test_every_answer_recomputed_from_text(stage, materialize):
    b = generate(CURRICULUM[stage], 200, np.random.default_rng(1), materialize_noise=materialize)
    for i in range(len(b)):
        assert solve(prompt_text(b, i)) == VOCAB.tokens[b.target[i]]


@pytest.mark.parametrize("stage", list(CURRICULUM))
def test_stage_constraints(stage):
    spec = CURRICULUM[stage]
    b = generate(spec, 500, np.random.default_rng(2))
    assert b.n_pairs.min() >= spec.min_pairs and b.n_pairs.max() <= spec.max_pairs
    if spec.min_pairs < spec.max_pairs:
        assert set(np.unique(b.n_pairs)) == set(range(spec.min_pairs, spec.max_pairs + 1))
    for i in range(len(b)):
        n = b.n_pairs[i]
        shown = 1 if b.task[i] == SOLO else n
        row = b.tokens[i, : b.answer_pos[i] + 1]
        colors = row[b.roles[i, : len(row)] == Role.CONTEXT_COLOR]
        shapes = row[b.roles[i, : len(row)] == Role.CONTEXT_SHAPE]
        items = row[b.roles[i, : len(row)] == Role.ASSOCIATION_ITEM]
        assert len(colors) == len(shapes) == shown and len(set(colors)) == len(set(shapes)) == shown
        assert len(set(items)) == len(items) == (0 if b.task[i] == GROUNDING else n)
        assert colors.min() >= VOCAB.color_offset and colors.max() < VOCAB.color_offset + spec.n_colors
        assert shapes.min() >= VOCAB.shape_offset and shapes.max() < VOCAB.shape_offset + spec.n_shapes
        if len(items):
            assert items.min() >= VOCAB.item_offset and items.max() < VOCAB.item_offset + spec.n_items
    orders = b.association_order
    identity = np.all((orders == np.arange(spec.max_pairs)) | (orders < 0), axis=1)
    if spec.shuffle:
        assert not identity[b.task == RETRIEVAL].all()
    else:
        assert identity.all()


def test_restricted_vocab_is_fully_used():
    b = generate(CURRICULUM["text_s1"], 2000, np.random.default_rng(3))
    assert set(np.unique(b.colors)) == set(VOCAB.color_offset + np.arange(8))
    assert set(np.unique(b.shapes)) == set(VOCAB.shape_offset + np.arange(8))


@pytest.mark.parametrize("stage", ["text_s5", "solo_practice"])
def test_roles_and_slots_point_at_the_bound_objects(stage):
    b = generate(CURRICULUM[stage], 300, np.random.default_rng(4))
    for i in range(len(b)):
        for t in range(b.answer_pos[i] + 1):
            role, slot, tok = b.roles[i, t], b.slots[i, t], b.tokens[i, t]
            if role == Role.CONTEXT_COLOR:
                assert tok == b.colors[i, slot]
            elif role == Role.CONTEXT_SHAPE:
                assert tok == b.shapes[i, slot]
            elif role == Role.ASSOCIATION_ITEM:
                assert tok == b.items[i, slot]
            elif role == Role.QUERY:
                assert slot == b.query_slot[i]
        assert b.roles[i, b.answer_pos[i]] == Role.ANSWER


def test_overrides_fix_task_direction_and_length():
    spec = CURRICULUM["mixed_tasks"]
    b = generate(spec, 100, np.random.default_rng(5), n_pairs=32, task=GROUNDING, query_by=BY_SHAPE)
    assert (b.n_pairs == 32).all() and (b.task == GROUNDING).all() and (b.query_by == BY_SHAPE).all()
    assert (b.target < VOCAB.shape_offset).all()  # grounding by shape answers a color
    b = generate(spec, 100, np.random.default_rng(5), task=RETRIEVAL, query_by=BY_COLOR)
    assert (b.target >= VOCAB.item_offset).all()


def test_one_hop_practice_mixes_grounding_and_lookup_and_validation_leaves_it_out():
    from vlbind.train import TrainConfig, validation_set

    spec = CURRICULUM["one_hop_practice"]
    b = generate(spec, 4000, np.random.default_rng(7))
    share = {t: (b.task == t).mean() for t in (RETRIEVAL, GROUNDING, LOOKUP)}
    assert abs(share[RETRIEVAL] - 0.4) < 0.03 and abs(share[GROUNDING] - 0.3) < 0.03 and abs(share[LOOKUP] - 0.3) < 0.03
    lookup = b.task == LOOKUP  # the query is the association key (a shape when items sit on shapes)
    keys = np.where(b.query_by == BY_COLOR, b.shapes.T, b.colors.T).T
    assert np.array_equal(b.tokens[lookup, b.answer_pos[lookup] - 1], keys[lookup, b.query_slot[lookup]])
    val = validation_set(spec, TrainConfig(val_size=300))
    assert all((v.task == RETRIEVAL).all() for v in val) and sum(len(v) for v in val) == 300


def test_solo_context_shows_the_queried_object_alone_and_validation_leaves_it_out():
    from vlbind.train import TrainConfig, validation_set

    spec = CURRICULUM["solo_practice"]
    b = generate(spec, 4000, np.random.default_rng(8))
    share = {t: (b.task == t).mean() for t in (RETRIEVAL, SOLO)}
    assert abs(share[RETRIEVAL] - 0.3) < 0.03 and abs(share[SOLO] - 0.3) < 0.03  # 0.6 retrieval, half solo
    solo = np.flatnonzero(b.task == SOLO)
    q = b.query_slot[solo]
    assert np.array_equal(b.slots[solo, 0], q) and np.array_equal(b.slots[solo, 1], q)
    assert np.array_equal(b.tokens[solo, 0], b.colors[solo, q]) and np.array_equal(b.tokens[solo, 1], b.shapes[solo, q])
    assert (b.roles[solo, 2] == Role.CONTEXT_END).all()
    keys = (b.roles[solo] == Role.ASSOCIATION_KEY).sum(axis=1)
    assert np.array_equal(keys, b.n_pairs[solo])  # every object keeps its association entry
    assert np.array_equal(b.target[solo], b.items[solo, q])
    assert (b.noise[solo] > 0).any() and (b.positions[solo, :3] == [0, 1, 2]).all()  # one pair: no noise gap
    val = validation_set(spec, TrainConfig(val_size=300))
    assert all((v.task == RETRIEVAL).all() for v in val)
    with pytest.raises(ValueError, match="solo_fraction"):
        StageSpec(image_fraction=0.5, solo_fraction=0.5)


def test_longest_fraction_oversamples_max_pairs_and_validation_draws_uniformly():
    from vlbind.train import TrainConfig, validation_set

    spec = StageSpec(216, 216, 8, 2, 5, longest_fraction=0.6)
    b = generate(spec, 8000, np.random.default_rng(9))
    share = np.bincount(b.n_pairs, minlength=6)[2:] / len(b)
    assert np.allclose(share, [0.1, 0.1, 0.1, 0.7], atol=0.02)  # 0.4 spread over 2..5, plus 0.6 at 5
    val = np.concatenate([v.n_pairs for v in validation_set(spec, TrainConfig(val_size=4000))])
    assert np.allclose(np.bincount(val, minlength=6)[2:] / len(val), 0.25, atol=0.025)


def test_noise_is_a_position_jump_of_100_between_consecutive_pairs():
    spec = StageSpec(216, 216, 32, 2, 8, noise_tokens=100, noise_fraction=1.0)
    b = generate(spec, 50, np.random.default_rng(6))
    m = generate(spec, 50, np.random.default_rng(6), materialize_noise=True)
    for i in range(len(b)):
        n, L = b.n_pairs[i], b.answer_pos[i] + 1
        assert (m.tokens[i] == VOCAB.noise).sum() == 100 * (n - 1)
        real = m.roles[i] != Role.NOISE
        real[m.answer_pos[i] + 1 :] = False
        assert np.array_equal(np.nonzero(real)[0], b.positions[i, :L])  # jumps == where the real tokens sit
        assert np.array_equal(m.tokens[i, real], b.tokens[i, :L])
        ctx = b.positions[i, : 2 * n]
        assert np.array_equal(np.diff(ctx)[1::2], np.full(n - 1, 101))  # shape -> next color skips 100


def test_position_jumps_move_the_list_and_the_query_block_only():
    from vlbind.train import TrainConfig, validation_set

    spec = StageSpec(216, 216, 8, 2, 8, grounding_fraction=0.3, jump_max=8)
    plain = generate(replace(spec, jump_max=0), 300, np.random.default_rng(10))
    b = generate(spec, 300, np.random.default_rng(10))  # jumps are drawn last: the same prompts
    for key in ("tokens", "roles", "target", "answer_pos"):
        assert np.array_equal(getattr(b, key), getattr(plain, key)), key
    shift = b.positions - plain.positions
    seen = set()
    for i in range(len(b)):
        roles, d = b.roles[i, : b.answer_pos[i] + 1], shift[i, : b.answer_pos[i] + 1]
        in_list = np.isin(roles, [Role.ASSOCIATION_KEY, Role.ASSOCIATION_ITEM, Role.SEP])
        in_query = np.isin(roles, [Role.QUESTION, Role.QUERY, Role.ANSWER])
        assert (d[~in_list & ~in_query] == 0).all()  # context and [CONTEXTEND] stay
        assert len(set(d[in_query])) == 1 and 0 <= d[in_query][0] <= 16
        if in_list.any():  # a grounding prompt has no list: both jumps lie before [QUESTION]
            before_list = d[in_list][0]
            assert (d[in_list] == before_list).all() and before_list <= d[in_query][0] <= before_list + 8
            seen.add((int(before_list), int(d[in_query][0] - before_list)))
    assert {a for a, _ in seen} == set(range(9)) and {q for _, q in seen} == set(range(9))
    val = validation_set(spec, TrainConfig(val_size=256))[0]
    assert np.array_equal(val.positions, np.broadcast_to(np.arange(val.positions.shape[1]), val.positions.shape))


def test_jump_fraction_moves_that_share_of_the_prompts_as_full_jumps_would():
    spec = StageSpec(216, 216, 8, 2, 8, jump_max=8, jump_fraction=0.3)
    plain = generate(replace(spec, jump_max=0), 4000, np.random.default_rng(11))
    every = generate(replace(spec, jump_fraction=1.0), 4000, np.random.default_rng(11))
    b = generate(spec, 4000, np.random.default_rng(11))
    assert np.array_equal(b.tokens, plain.tokens)
    moved = (b.positions != plain.positions).any(axis=1)
    assert np.array_equal(b.positions[moved], every.positions[moved])  # the same jumps, on a share of prompts
    assert np.array_equal(b.positions[~moved], plain.positions[~moved])
    assert abs(moved.mean() - 0.3 * 80 / 81) < 0.025  # a jumped prompt stays put when both jumps are 0


def test_noise_fraction_is_respected():
    spec = StageSpec(216, 216, 32, 2, 8, noise_tokens=100, noise_fraction=0.5)
    b = generate(spec, 4000, np.random.default_rng(7))
    assert abs((b.noise > 0).mean() - 0.5) < 0.04


def test_same_seed_same_batch():
    a = generate(CURRICULUM["noise_text"], 64, np.random.default_rng(8))
    b = generate(CURRICULUM["noise_text"], 64, np.random.default_rng(8))
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.positions, b.positions)


@pytest.mark.parametrize("bad, key", [({"n_colors": 300}, "n_colors"), ({"min_pairs": 5, "max_pairs": 3}, "min_pairs"),
                                      ({"n_items": 4}, "n_items"), ({"noise_fraction": 2.0}, "noise_fraction")])
def test_bad_spec_names_the_key(bad, key):
    with pytest.raises(ValueError, match=key):
        StageSpec(**{**dict(n_colors=216, n_shapes=216, n_items=32, min_pairs=2, max_pairs=8), **bad})


def test_paper_example_is_solved():
    text = ("color0113 shape0055 color0119 shape0041 color0153 shape0091 [CONTEXTEND] shape0041 item0029 [SEP] "
            "shape0055 item0025 [SEP] shape0091 item0020 [QUESTION] color0119 [ANSWER]")
    assert solve(text) == "item0029"
    assert VOCAB.decode(VOCAB.encode(text)) == text
