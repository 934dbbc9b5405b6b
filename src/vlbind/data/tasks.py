"""Prompt generators for indirect retrieval and feature grounding (paper, section 3 and appendix C).

Layout of a retrieval prompt with n objects (compact index t, no noise):

    t = 0..2n-1        context: color shape color shape ...             (the object in slot p at 2p, 2p+1)
    t = 2n             [CONTEXTEND]
    t = 2n+1+3j        association key (shape; a color when queried by shape) of entry j
    t = 2n+2+3j        association item of entry j, then [SEP] for j < n-1
    t = 5n, 5n+1, 5n+2 [QUESTION] query [ANSWER]                         (length 5n+3)

A grounding prompt has no association list: context, [CONTEXTEND] [QUESTION] query [ANSWER] (2n+4).

Practice prompts (not in the paper; StageSpec.lookup_fraction, solo_fraction; validation and evaluation leave
them out) take one hop of the two-hop lookup away:
- a one-hop lookup prompt is a retrieval prompt whose query is an association key (a shape; a color when queried
  by shape) and whose answer is that entry's item: the list lookup without the context;
- a solo-context prompt is a retrieval prompt whose context shows the queried object alone (length 3n+5), the
  association list whole: the item needs the lookup keyed by the shape read from the context, but not the
  choice among the context's objects.
Objects are identified by their *slot* p, their index in the context. Every batch carries the role of
every position, the slot it refers to and the bindings (color, shape, item per slot), so analyses never
re-parse text.

Unattendable noise (appendix D.4) is realised as a jump of `noise_tokens` in the RoPE position ids
between consecutive context objects: tokens nobody may attend to change nothing but the positions of what
follows. `materialize_noise=True` instead writes the [NOISE] tokens out (for display and for the test that
proves both realisations equal when noise keys are masked).

Dense supervision (`pack_queries`, not in the paper): one sequence holds a context once and a query group for
each of its objects; the model's group mask makes every query group exactly one prompt of the paper's distribution.

Everything is vectorised over the batch with numpy; randomness comes only from the `rng` argument.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

from vlbind.core.vocab import VOCAB, Vocab
from vlbind.data.spec import StageSpec

if TYPE_CHECKING:
    from vlbind.data.bank import ImageBank


class Role(IntEnum):
    PAD = 0
    CONTEXT_COLOR = 1
    CONTEXT_SHAPE = 2
    CONTEXT_END = 3
    ASSOCIATION_KEY = 4  # the shape of an association entry (its color in the symmetric variant)
    ASSOCIATION_ITEM = 5
    SEP = 6
    QUESTION = 7
    QUERY = 8  # the queried attribute after [QUESTION]
    ANSWER = 9
    NOISE = 10
    CONTEXT_IMAGE = 11  # an image patch token; its slot is the object it shows (-1: background)


# prompt kinds (Batch.kind): retrieval; grounding only (no association list); the practice prompts (module doc):
# one-hop lookup of an association key, retrieval with the queried object alone in the context
RETRIEVAL, GROUNDING, LOOKUP, SOLO = 0, 1, 2, 3
BY_COLOR, BY_SHAPE = 0, 1
TEXT, IMAGE = 0, 1  # modality of a prompt's context


def max_position(n_objects: int, noise_tokens: int = 0) -> int:
    """The largest RoPE position id of a text retrieval prompt with `n_objects` objects and `noise_tokens`
    noise positions between consecutive context objects (the layout in the module docstring): the model's
    max_positions must exceed it. Image contexts carry no noise; their length depends on the encoder."""
    return 5 * n_objects + 2 + noise_tokens * (n_objects - 1)


@dataclass
class Batch:
    """A batch of prompts. Arrays are numpy; (B, T) arrays are right-padded with [PAD] / Role.PAD."""

    tokens: np.ndarray  # (B, T) int64; [IMAGE] at image patch positions
    positions: np.ndarray  # (B, T) int64 RoPE position ids
    roles: np.ndarray  # (B, T) int8, Role
    slots: np.ndarray  # (B, T) int8, object slot a position refers to, -1 for none
    answer_pos: np.ndarray  # (B,) index of [ANSWER] in `tokens`
    target: np.ndarray  # (B,) token id the model must predict at [ANSWER]
    n_objects: np.ndarray  # (B,)
    colors: np.ndarray  # (B, P) color token id of slot p, -1 beyond n_objects
    shapes: np.ndarray  # (B, P)
    items: np.ndarray  # (B, P) item bound to slot p
    association_slots: np.ndarray  # (B, P) slot of association entry j, -1 beyond n_objects
    query_slot: np.ndarray  # (B,)
    kind: np.ndarray  # (B,) RETRIEVAL or GROUNDING: the prompt's kind
    query_by: np.ndarray  # (B,) BY_COLOR or BY_SHAPE
    noise: np.ndarray  # (B,) noise tokens per gap between context objects
    modality: np.ndarray  # (B,) TEXT or IMAGE context
    image_ids: np.ndarray  # (B, T) int64 image-bank row shown at a position, -1 for text positions
    patches: np.ndarray  # (B, T) int64 patch index within that image, -1 for text positions
    # Packed batches only (pack_queries): (B, T) query group of each position, -1 for the shared prefix and
    # padding; answer_pos, target and query_slot are then (B, Q), -1 where a prompt has fewer than Q queries.
    groups: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.target)

    def subset(self, keep: np.ndarray) -> Batch:
        """The prompts selected by `keep` (a boolean mask or indices over the batch)."""
        return Batch(**{k: None if v is None else v[keep] for k, v in vars(self).items()})


TOKEN_ARRAYS = ("tokens", "positions", "roles", "slots", "image_ids", "patches")  # Batch's (B, T) arrays


def generate(spec: StageSpec, batch_size: int, rng: np.random.Generator, *, n_objects: int | None = None,
             kind: int | None = None, query_by: int | None = None, noise: bool | None = None,
             modality: int | None = None, bank: ImageBank | None = None, materialize_noise: bool = False,
             vocab: Vocab = VOCAB) -> Batch:
    """Sample `batch_size` prompts from `spec`.

    Keyword overrides fix what is otherwise random: the number of objects (may exceed max_objects, for
    evaluation), the prompt kind (RETRIEVAL / GROUNDING), the query direction, whether noise is inserted and
    the context's modality.
    Image contexts (appendix C) replace the context's color and shape tokens by the patch tokens of images
    from `bank`: one image per object (per_object layout) or one canvas holding every object (canvas layout, which then
    decides the prompt's colors and shapes); association list and query stay text. Image contexts carry
    no noise.
    """
    B, P = batch_size, spec.max_objects if n_objects is None else n_objects
    if n_objects is None:
        n = rng.integers(spec.min_objects, spec.max_objects + 1, size=B)
    else:
        for key in ("n_colors", "n_shapes", "n_items"):
            if getattr(spec, key) < n_objects:
                raise ValueError(f"n_objects={n_objects} needs {key} >= {n_objects}, spec has {getattr(spec, key)}")
        n = np.full(B, n_objects)
    color_idx = _distinct(rng, B, spec.n_colors, P)
    shape_idx = _distinct(rng, B, spec.n_shapes, P)
    items = vocab.item_offset + _distinct(rng, B, spec.n_items, P)
    valid = np.arange(P)[None, :] < n[:, None]
    if spec.shuffle:
        keys = np.where(valid, rng.random((B, P)), 2.0)
        entry_slots = np.argsort(keys, axis=1, kind="stable")
    else:
        entry_slots = np.broadcast_to(np.arange(P), (B, P)).copy()
    entry_slots[~valid] = -1
    query_slot = (rng.random(B) * n).astype(np.int64)
    kind_ = _choice(rng, B, spec.grounding_fraction, kind, GROUNDING, RETRIEVAL)
    for fraction, practice in ((spec.lookup_fraction, LOOKUP), (spec.solo_fraction, SOLO)):
        if kind is None and fraction > 0:  # draws nothing otherwise: stages without practice keep their stream
            kind_ = np.where((kind_ == RETRIEVAL) & (rng.random(B) < fraction), practice, kind_)
    by = _choice(rng, B, spec.symmetric_fraction, query_by, BY_SHAPE, BY_COLOR)
    noisy = rng.random(B) < spec.noise_fraction if noise is None else np.full(B, bool(noise))
    if modality is None and spec.image_fraction == 0:
        modal = np.full(B, TEXT, dtype=np.int64)  # draws nothing: text stages keep their random stream
    else:
        modal = _choice(rng, B, spec.image_fraction, modality, IMAGE, TEXT)
    pictured = modal == IMAGE
    if pictured.any() and bank is None:
        raise ValueError("image-context prompts (image_fraction > 0 or modality=IMAGE) need an image bank")
    if (pictured & ((kind_ == LOOKUP) | (kind_ == SOLO))).any():
        raise ValueError("practice prompts (kind LOOKUP, SOLO) have text contexts only")
    gap = np.where(noisy & ~pictured, spec.noise_tokens, 0)

    picture = _pictures(bank, pictured, n, valid, color_idx, shape_idx, rng)
    colors = np.where(valid, vocab.color_offset + color_idx, -1)
    shapes = np.where(valid, vocab.shape_offset + shape_idx, -1)
    items[~valid] = -1
    batch = assemble(n=n, colors=colors, shapes=shapes, items=items, entry_slots=entry_slots, query_slot=query_slot,
                     kind=kind_, query_by=by, gap=gap, modality=modal, picture=picture, bank=bank, vocab=vocab)
    return _materialize(batch, vocab) if materialize_noise else batch


def _pictures(bank: ImageBank | None, pictured: np.ndarray, n: np.ndarray, valid: np.ndarray, color_idx: np.ndarray,
              shape_idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The images of the `pictured` prompts' contexts, drawn from `bank`: (B, P) image ids, one per slot (per_object
    layout) or one per prompt in column 0 (canvas layout, whose canvas then decides the prompt's colors and shapes:
    written into `color_idx` and `shape_idx`); -1 elsewhere. Draws nothing where no prompt is pictured."""
    B, P = valid.shape
    picture = np.full((B, P), -1, dtype=np.int64)
    if pictured.any() and bank.layout == "canvas":
        canvases = bank.sample_canvases(n[pictured], rng)
        picture[pictured, 0] = canvases
        color_idx[pictured] = bank.canvas_colors[canvases, :P]
        shape_idx[pictured] = bank.canvas_shapes[canvases, :P]
    elif pictured.any():
        picture[pictured] = bank.sample_object_images(np.where(valid, color_idx, -1)[pictured],
                                                      np.where(valid, shape_idx, -1)[pictured], rng)
    return picture


def assemble(*, n, colors, shapes, items, entry_slots, query_slot, kind, query_by, gap, modality=None, picture=None,
             bank: ImageBank | None = None, vocab: Vocab = VOCAB) -> Batch:
    """Lay out prompts from their bindings (the inverse of reading a Batch's binding fields).

    colors / shapes / items: (B, P) token ids per slot, -1 beyond n; entry_slots: (B, P) slot of each association
    entry; gap: noise positions between context objects. Image contexts (modality IMAGE) need `picture`,
    the bank row per slot (per_object) or per prompt in column 0 (canvas). `generate` samples the
    bindings; analyses call this directly to build counterfactual prompts.
    """
    B, P = colors.shape
    modality = np.full(B, TEXT, dtype=np.int64) if modality is None else modality
    pictured = modality == IMAGE
    kind_, by, q = kind, query_by, query_slot  # short names for the layout arithmetic below
    valid = np.arange(P)[None, :] < n[:, None]
    K = bank.tokens_per_image if bank is not None else 0
    pictured_ctx = K if bank is not None and bank.layout == "canvas" else K * n  # one canvas, or an image per object
    solo = kind_ == SOLO
    shown = np.where(solo, 1, n)  # objects the context shows
    ctx = np.where(pictured, pictured_ctx, 2 * shown)

    listed = kind_ != GROUNDING  # prompts with an association list
    length = np.where(listed, ctx + 3 * n + 3, ctx + 4)
    T = int(length.max())
    rows = np.arange(B)
    tokens = np.full((B, T), vocab.pad, dtype=np.int64)
    roles = np.full((B, T), Role.PAD, dtype=np.int8)
    slots = np.full((B, T), -1, dtype=np.int8)
    image_ids = np.full((B, T), -1, dtype=np.int64)
    patches = np.full((B, T), -1, dtype=np.int64)

    def put(r, t, tok, role, slot=-1):
        tokens[r, t], roles[r, t], slots[r, t] = tok, role, slot

    r, p = np.nonzero(valid & ~pictured[:, None] & (~solo[:, None] | (np.arange(P)[None, :] == q[:, None])))
    t = np.where(solo[r], 0, 2 * p)
    put(r, t, colors[r, p], Role.CONTEXT_COLOR, p)
    put(r, t + 1, shapes[r, p], Role.CONTEXT_SHAPE, p)
    if pictured.any():
        r, t = np.nonzero(pictured[:, None] & (np.arange(T)[None, :] < ctx[:, None]))
        if bank.layout == "canvas":
            image, patch = picture[r, 0], t
            slot = bank.patch_slot[image, patch]
        else:
            slot, patch = t // K, t % K
            image = picture[r, slot]
        put(r, t, vocab.image, Role.CONTEXT_IMAGE, slot)
        image_ids[r, t], patches[r, t] = image, patch
    put(rows, ctx, vocab.context_end, Role.CONTEXT_END)

    r, j = np.nonzero(valid & listed[:, None])
    s = entry_slots[r, j]
    start = ctx[r] + 1 + 3 * j
    key = np.where(by[r] == BY_COLOR, shapes[r, s], colors[r, s])
    put(r, start, key, Role.ASSOCIATION_KEY, s)
    put(r, start + 1, items[r, s], Role.ASSOCIATION_ITEM, s)
    more = j < n[r] - 1
    put(r[more], start[more] + 2, vocab.sep, Role.SEP)

    answer_pos = length - 1
    put(rows, answer_pos - 2, vocab.question, Role.QUESTION)
    query, target = _query_target(colors, shapes, items, kind_, by, q[:, None])
    put(rows, answer_pos - 1, query[:, 0], Role.QUERY, q)
    put(rows, answer_pos, vocab.answer, Role.ANSWER)
    target = target[:, 0]

    t = np.arange(T)[None, :]
    positions = t + gap[:, None] * np.minimum(t // 2, shown[:, None] - 1)
    return Batch(tokens=tokens, positions=positions, roles=roles, slots=slots, answer_pos=answer_pos, target=target,
                 n_objects=n, colors=colors, shapes=shapes, items=items, association_slots=entry_slots, query_slot=q,
                 kind=kind_, query_by=by, noise=gap, modality=modality, image_ids=image_ids, patches=patches)


def _query_target(colors, shapes, items, kind, query_by, slots) -> tuple[np.ndarray, np.ndarray]:
    """(query token, target token) of querying slots (B, Q) of each prompt, (B, Q) each."""
    def at(a):
        return np.take_along_axis(a, slots, axis=1)
    by_color, kind = (query_by == BY_COLOR)[:, None], kind[:, None]
    attribute = np.where(by_color, at(colors), at(shapes))  # the queried object's attribute
    linked = np.where(by_color, at(shapes), at(colors))  # its other one: the association key
    query = np.where(kind == LOOKUP, linked, attribute)
    return query, np.where(kind == GROUNDING, linked, at(items))


def pack_queries(batch: Batch, vocab: Vocab = VOCAB) -> Batch:
    """Every object of each prompt queried in one sequence (dense supervision; not in the paper).

    The shared prefix (everything before [QUESTION]) is followed by n query groups `[QUESTION] q_p [ANSWER]`,
    p = 0..n-1, each at the RoPE positions of the prompt's single query group. `groups` marks each position's
    query group; the model lets a group attend to the prefix and to itself only (Transformer.residual), so
    group p is exactly the prompt that queries slot p. A solo-context prompt has one group, its own query (the
    context shows no other object). answer_pos, target and query_slot become (B, Q), Q = the largest number of
    groups, -1 where a prompt has fewer.
    """
    if batch.groups is not None:
        raise ValueError("pack_queries: the batch is packed already")
    B, T = batch.tokens.shape
    solo = batch.kind == SOLO
    n = np.where(solo, 1, batch.n_objects)  # query groups per prompt
    prefix = batch.answer_pos - 2  # length of the shared prefix; the single query group follows it
    Q, Tp = int(n.max()), int((prefix + 3 * n).max())
    t = np.arange(Tp)[None, :]
    shared = t < prefix[:, None]
    src = np.minimum(t, T - 1)

    def copy(a, fill):
        return np.where(shared, np.take_along_axis(a, src, axis=1), fill).astype(a.dtype)

    tokens, roles, slots = copy(batch.tokens, vocab.pad), copy(batch.roles, Role.PAD), copy(batch.slots, -1)
    image_ids, patches, positions = copy(batch.image_ids, -1), copy(batch.patches, -1), copy(batch.positions, 0)
    groups = np.full((B, Tp), -1, dtype=np.int8)

    has = np.arange(Q)[None, :] < n[:, None]
    p = np.where(solo[:, None], batch.query_slot[:, None], np.arange(Q)[None, :])  # slot each group queries
    p = np.where(has, p, 0)
    query, target = _query_target(batch.colors, batch.shapes, batch.items, batch.kind, batch.query_by, p)
    r, j = np.nonzero(has)
    start = prefix[r] + 3 * j
    for k, (tok, role) in enumerate([(vocab.question, Role.QUESTION), (query[r, j], Role.QUERY),
                                     (vocab.answer, Role.ANSWER)]):
        tokens[r, start + k], roles[r, start + k], groups[r, start + k] = tok, role, j
        positions[r, start + k] = batch.positions[r, prefix[r] + k]
    slots[r, start + 1] = p[r, j]
    answer_pos = np.where(has, prefix[:, None] + 3 * np.arange(Q)[None, :] + 2, -1)
    return replace(batch, tokens=tokens, positions=positions, roles=roles, slots=slots, image_ids=image_ids,
                   patches=patches, answer_pos=answer_pos, target=np.where(has, target, -1),
                   query_slot=np.where(has, p, -1), groups=groups)


def _distinct(rng: np.random.Generator, B: int, K: int, P: int) -> np.ndarray:
    """(B, P) indices in 0..K-1, distinct within each row."""
    if P > K:
        raise ValueError(f"cannot draw {P} distinct tokens from {K}")
    return np.argsort(rng.random((B, K)), axis=1)[:, :P]


def _choice(rng, B, fraction, fixed, yes, no) -> np.ndarray:
    if fixed is not None:
        return np.full(B, fixed, dtype=np.int64)
    return np.where(rng.random(B) < fraction, yes, no).astype(np.int64)


def _materialize(b: Batch, vocab: Vocab) -> Batch:
    """Write noise out as [NOISE] tokens at the positions the noise jumps leave empty."""
    B, T = b.tokens.shape
    length = b.answer_pos + 1
    full_len = b.positions[np.arange(B), b.answer_pos] + 1  # noise gaps included
    Tm = int(full_len.max())
    inside = np.arange(Tm)[None, :] < full_len[:, None]
    tokens = np.where(inside, vocab.noise, vocab.pad).astype(np.int64)
    roles = np.where(inside, Role.NOISE, Role.PAD).astype(np.int8)
    slots = np.full((B, Tm), -1, dtype=np.int8)
    real = np.arange(T)[None, :] < length[:, None]
    r, t = np.nonzero(real)
    dest = b.positions[r, t]
    tokens[r, dest], roles[r, dest], slots[r, dest] = b.tokens[r, t], b.roles[r, t], b.slots[r, t]
    image_ids, patches = np.full((B, Tm), -1, dtype=np.int64), np.full((B, Tm), -1, dtype=np.int64)
    image_ids[r, dest], patches[r, dest] = b.image_ids[r, t], b.patches[r, t]
    positions = np.broadcast_to(np.arange(Tm), (B, Tm)).copy()
    answer_pos = b.positions[np.arange(B), b.answer_pos]
    return replace(b, tokens=tokens, positions=positions, roles=roles, slots=slots, answer_pos=answer_pos,
                   image_ids=image_ids, patches=patches)


def prompt_text(batch: Batch, i: int, vocab: Vocab = VOCAB) -> str:
    """Prompt i in the paper's text format, up to and including [ANSWER] (the last one of a packed prompt);
    an image context is shown as `<image ID: K tokens>` per image (ID = its bank row)."""
    words, t, end = [], 0, int(np.max(batch.answer_pos[i])) + 1  # a packed prompt: its last query group
    while t < end:
        image = batch.image_ids[i, t]
        if image < 0:
            if batch.tokens[i, t] != vocab.pad:
                words.append(vocab.tokens[batch.tokens[i, t]])
            t += 1
            continue
        k = t
        while k < end and batch.image_ids[i, k] == image and (k == t or batch.patches[i, k] > batch.patches[i, k - 1]):
            k += 1
        words.append(f"<image {image}: {k - t} tokens>")
        t = k
    return " ".join(words)
