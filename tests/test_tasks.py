"""Task generators: every answer recomputed from the prompt text; stage constraints; noise layout."""


import numpy as np
import pytest

from vlbind.core.vocab import VOCAB
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import (
    BY_COLOR,
    BY_SHAPE,
    GROUNDING,
    LOOKUP,
    RETRIEVAL,
    SOLO,
    Role,
    generate,
    pack_queries,
    prompt_text,
)

CURRICULUM = {
    "text_s1": StageSpec(8, 8, 8, 2, 2, shuffle=False, symmetric_fraction=0.5),
    "text_s2": StageSpec(216, 216, 8, 2, 2, shuffle=False, symmetric_fraction=0.5),
    "text_s3": StageSpec(216, 216, 8, 2, 8, shuffle=False, symmetric_fraction=0.5),
    "text_s4": StageSpec(216, 216, 8, 2, 8, shuffle=True, symmetric_fraction=0.5),
    "text_s5": StageSpec(216, 216, 32, 2, 8, shuffle=True, symmetric_fraction=0.5),
    "noise_text": StageSpec(216, 216, 32, 2, 8, shuffle=True, symmetric_fraction=0.5, noise_tokens=100,
                            noise_fraction=0.5),
    "mixed_tasks": StageSpec(216, 216, 32, 2, 8, grounding_fraction=0.5, symmetric_fraction=0.5),
    "practice": StageSpec(216, 216, 8, 2, 8, shuffle=True, grounding_fraction=0.2, symmetric_fraction=0.5,
                          lookup_fraction=0.3, solo_fraction=0.5, noise_tokens=100, noise_fraction=0.5),
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
    middle = toks[end + 1 : -3]
    assoc = dict(e.split() for e in " ".join(middle).split(" [SEP] ")) if middle else {}
    if query in assoc:  # a one-hop lookup (practice prompt): the query names an association key
        return assoc[query]
    if query.startswith("color"):
        (entity,) = [s for c, s in pairs if c == query]
    else:
        (entity,) = [c for c, s in pairs if s == query]
    if not middle:  # feature grounding
        return entity
    # one entry per context pair; a solo context (practice prompt) shows one pair of a longer list
    assert len(assoc) == len(pairs) or (len(pairs) == 1 and len(assoc) > 1)
    return assoc[entity]


def keys_in_context_order(text: str) -> bool:
    """Whether a retrieval prompt's association keys follow its context's order (a fixed-order list), from its
    text alone (query by color)."""
    context, rest = text.split(" [CONTEXTEND] ")
    listing = rest.split(" [QUESTION] ")[0]
    return [e.split()[0] for e in listing.split(" [SEP] ")] == context.split()[1::2]


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
    assert b.n_objects.min() >= spec.min_objects and b.n_objects.max() <= spec.max_objects
    if spec.min_objects < spec.max_objects:
        assert set(np.unique(b.n_objects)) == set(range(spec.min_objects, spec.max_objects + 1))
    for i in range(len(b)):
        n = b.n_objects[i]
        row = b.tokens[i, : b.answer_pos[i] + 1]
        colors = row[b.roles[i, : len(row)] == Role.CONTEXT_COLOR]
        shapes = row[b.roles[i, : len(row)] == Role.CONTEXT_SHAPE]
        items = row[b.roles[i, : len(row)] == Role.ASSOCIATION_ITEM]
        shown = 1 if b.kind[i] == SOLO else n  # a solo context shows the queried object alone
        assert len(colors) == len(shapes) == shown and len(set(colors)) == len(set(shapes)) == shown
        assert len(set(items)) == len(items) == (0 if b.kind[i] == GROUNDING else n)
        assert colors.min() >= VOCAB.color_offset and colors.max() < VOCAB.color_offset + spec.n_colors
        assert shapes.min() >= VOCAB.shape_offset and shapes.max() < VOCAB.shape_offset + spec.n_shapes
        if len(items):
            assert items.min() >= VOCAB.item_offset and items.max() < VOCAB.item_offset + spec.n_items
    orders = b.association_slots
    identity = np.all((orders == np.arange(spec.max_objects)) | (orders < 0), axis=1)
    if spec.shuffle:
        assert not identity[b.kind == RETRIEVAL].all()
    else:
        assert identity.all()


def test_restricted_vocab_is_fully_used():
    b = generate(CURRICULUM["text_s1"], 2000, np.random.default_rng(3))
    assert set(np.unique(b.colors)) == set(VOCAB.color_offset + np.arange(8))
    assert set(np.unique(b.shapes)) == set(VOCAB.shape_offset + np.arange(8))


@pytest.mark.parametrize("stage", ["text_s5", "mixed_tasks", "practice"])
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
    b = generate(spec, 100, np.random.default_rng(5), n_objects=32, kind=GROUNDING, query_by=BY_SHAPE)
    assert (b.n_objects == 32).all() and (b.kind == GROUNDING).all() and (b.query_by == BY_SHAPE).all()
    assert (b.target < VOCAB.shape_offset).all()  # grounding by shape answers a color
    b = generate(spec, 100, np.random.default_rng(5), kind=RETRIEVAL, query_by=BY_COLOR)
    assert (b.target >= VOCAB.item_offset).all()


def test_noise_is_a_position_jump_of_100_between_consecutive_pairs():
    spec = StageSpec(216, 216, 32, 2, 8, noise_tokens=100, noise_fraction=1.0)
    b = generate(spec, 50, np.random.default_rng(6))
    m = generate(spec, 50, np.random.default_rng(6), materialize_noise=True)
    for i in range(len(b)):
        n, L = b.n_objects[i], b.answer_pos[i] + 1
        assert (m.tokens[i] == VOCAB.noise).sum() == 100 * (n - 1)
        real = m.roles[i] != Role.NOISE
        real[m.answer_pos[i] + 1 :] = False
        assert np.array_equal(np.nonzero(real)[0], b.positions[i, :L])  # jumps == where the real tokens sit
        assert np.array_equal(m.tokens[i, real], b.tokens[i, :L])
        ctx = b.positions[i, : 2 * n]
        assert np.array_equal(np.diff(ctx)[1::2], np.full(n - 1, 101))  # shape -> next color skips 100


def test_noise_fraction_is_respected():
    spec = StageSpec(216, 216, 32, 2, 8, noise_tokens=100, noise_fraction=0.5)
    b = generate(spec, 4000, np.random.default_rng(7))
    assert abs((b.noise > 0).mean() - 0.5) < 0.04


def test_same_seed_same_batch():
    a = generate(CURRICULUM["noise_text"], 64, np.random.default_rng(8))
    b = generate(CURRICULUM["noise_text"], 64, np.random.default_rng(8))
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.positions, b.positions)


@pytest.mark.parametrize("bad, key", [({"n_colors": 300}, "n_colors"),
                                      ({"min_objects": 5, "max_objects": 3}, "min_objects"),
                                      ({"n_items": 4}, "n_items"), ({"noise_fraction": 2.0}, "noise_fraction")])
def test_bad_spec_names_the_key(bad, key):
    with pytest.raises(ValueError, match=key):
        StageSpec(**{**dict(n_colors=216, n_shapes=216, n_items=32, min_objects=2, max_objects=8), **bad})


def test_paper_example_is_solved():
    text = ("color0113 shape0055 color0119 shape0041 color0153 shape0091 [CONTEXTEND] shape0041 item0029 [SEP] "
            "shape0055 item0025 [SEP] shape0091 item0020 [QUESTION] color0119 [ANSWER]")
    assert solve(text) == "item0029"
    assert VOCAB.decode(VOCAB.encode(text)) == text


def test_practice_prompts_keep_one_hop_and_validation_leaves_them_out():
    spec = CURRICULUM["practice"]
    b = generate(spec, 4000, np.random.default_rng(3))
    share = np.bincount(b.kind, minlength=4) / len(b)
    assert abs(share[GROUNDING] - 0.2) < 0.03 and abs(share[LOOKUP] - 0.8 * 0.3) < 0.03
    assert abs(share[SOLO] - 0.8 * 0.7 * 0.5) < 0.03  # half the retrieval prompts lookup_fraction leaves
    solo = np.flatnonzero(b.kind == SOLO)
    q = b.query_slot[solo]
    assert np.array_equal(b.tokens[solo, 0], b.colors[solo, q]) and np.array_equal(b.tokens[solo, 1], b.shapes[solo, q])
    assert (b.slots[solo, :2] == q[:, None]).all() and (b.roles[solo, 2] == Role.CONTEXT_END).all()
    assert np.array_equal((b.roles[solo] == Role.ASSOCIATION_KEY).sum(1), b.n_objects[solo])  # the whole list
    assert (b.noise[solo] > 0).any() and (b.positions[solo, :3] == [0, 1, 2]).all()  # one object: no noise gap
    for i in np.flatnonzero(b.kind == LOOKUP)[:50]:  # the query is the key of the queried object's entry
        text = prompt_text(b, i)
        assert text.split()[-2] in text.split(" [CONTEXTEND] ")[1].split(" [QUESTION] ")[0].split()
        assert b.target[i] == b.items[i, b.query_slot[i]]
    plain = spec.for_validation()
    assert (plain.lookup_fraction, plain.solo_fraction) == (0.0, 0.0) and plain.grounding_fraction == 0.2
    with pytest.raises(ValueError, match="solo_fraction"):
        StageSpec(image_fraction=0.5, solo_fraction=0.5)


def test_a_packed_solo_context_prompt_queries_its_one_object():
    b = generate(CURRICULUM["practice"], 300, np.random.default_rng(4))
    pb = pack_queries(b)
    n_groups = (pb.target >= 0).sum(1)
    assert np.array_equal(n_groups, np.where(b.kind == SOLO, 1, b.n_objects))
    solo = np.flatnonzero(b.kind == SOLO)
    assert np.array_equal(pb.query_slot[solo, 0], b.query_slot[solo])
    assert np.array_equal(pb.target[solo, 0], b.target[solo])
    assert np.array_equal(pb.tokens[solo, pb.answer_pos[solo, 0] - 1], b.tokens[solo, b.answer_pos[solo] - 1])



def test_validation_of_a_text_retrieval_stage_queries_by_color_and_grounding_keeps_both_directions():
    """config.yaml's text stages train half their prompts queried by shape; their validation (the pass bar) asks by
    color only, the direction the paper evaluates. A grounding stage (both directions by definition) and an image
    stage keep the mix; a stage without symmetric prompts validates on its own task unchanged (mini's)."""
    from vlbind.training.config import TrainConfig
    from vlbind.training.loop import validation_set

    cfg = TrainConfig(val_size=512)
    text = StageSpec(symmetric_fraction=0.5, solo_fraction=0.5)
    trained = generate(text, 512, np.random.default_rng(0))
    assert 0.4 < (trained.query_by == BY_SHAPE).mean() < 0.6
    assert all((b.query_by == BY_COLOR).all() and (b.kind == RETRIEVAL).all() for b in validation_set(text, cfg))
    grounding = StageSpec(symmetric_fraction=0.5, grounding_fraction=1.0)
    assert 0.4 < np.mean(np.concatenate([b.query_by == BY_SHAPE for b in validation_set(grounding, cfg)])) < 0.6
    plain = StageSpec(symmetric_fraction=0.0)
    assert plain.for_validation() == plain
