"""`python -m vlbind ...`: command-line entry points.

    python -m vlbind sample --stage text_s4 --count 5 --seed 0 [--kind retrieval|grounding] [--noise]
        one prompt per line in the paper's text format, a tab, then the answer token.
    python -m vlbind sample --stage image --bank results/banks/per_object \
                            --features results/features/resnet152/per_object.npy
        image-context prompts; each image is shown as <image ID: K tokens> (bank row ID).
    python -m vlbind sample --stage text_s5 --counterfactual --count 5 --seed 0
        interchange pairs: original <TAB> counterfactual <TAB> the items predicted by the positional,
        color-key, shape-key, reflexive and no-effect mechanisms (prompts of 5.. objects).
    python -m vlbind check-config config/config.yaml my-overlay.yaml
        merge and validate config files as Snakemake would; a YAML error names its file and line.
    python -m vlbind config-reference [--write config/README.md]
        the table of every config key: its meaning and source (the schema's), its value in config.yaml and mini.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from vlbind.core.settings import DEFAULTS_FILE


def _sample(args) -> int:
    from vlbind import config as vlconfig
    from vlbind import params as vlparams
    from vlbind.core.stages import STAGE_PARENTS
    from vlbind.core.vocab import VOCAB
    from vlbind.data.spec import StageSpec
    from vlbind.data.tasks import BY_COLOR, BY_SHAPE, GROUNDING, RETRIEVAL, TEXT, generate, prompt_text

    cfg = vlconfig.load(args.config)
    if args.stage not in STAGE_PARENTS:
        print(f"error: unknown stage {args.stage!r}; valid: {', '.join(STAGE_PARENTS)}", file=sys.stderr)
        return 2
    spec = StageSpec.from_dict(vlparams.stage_section(cfg, args.stage)["task"])
    if args.counterfactual:
        return _counterfactuals(spec, args)
    if args.noise and spec.noise_tokens == 0:
        spec = StageSpec.from_dict({**spec.to_dict(), "noise_tokens": 100})
    kind = {"retrieval": RETRIEVAL, "grounding": GROUNDING}[args.kind]
    by = None if args.query_by == "any" else {"color": BY_COLOR, "shape": BY_SHAPE}[args.query_by]
    bank, modality = None, None
    if args.bank or args.features:
        from vlbind.data.bank import ImageBank

        if not (args.bank and args.features):
            print("error: --bank and --features go together", file=sys.stderr)
            return 2
        bank = ImageBank.open(args.bank, args.features)
    elif spec.image_fraction > 0:
        print(f"note: stage {args.stage} has image contexts; without --bank/--features its text form is shown",
              file=sys.stderr)
        modality = TEXT
    batch = generate(spec, args.count, np.random.default_rng(args.seed), kind=kind, query_by=by,
                     noise=args.noise, modality=modality, bank=bank, materialize_noise=args.noise)
    for i in range(len(batch)):
        print(f"{prompt_text(batch, i)}\t{VOCAB.tokens[batch.target[i]]}")
    return 0


def _counterfactuals(spec, args) -> int:
    from dataclasses import replace

    from vlbind.core.vocab import VOCAB
    from vlbind.data.tasks import prompt_text
    from vlbind.interp.interchange import make_pairs

    if spec.max_objects < 5:
        print(f"error: stage {args.stage} has at most {spec.max_objects} objects; interchange pairs need 5",
              file=sys.stderr)
        return 2
    spec = replace(spec, min_objects=max(5, spec.min_objects), image_fraction=0.0, noise_tokens=0)
    pairs = make_pairs(args.count, np.random.default_rng(args.seed), spec)
    for i in range(len(pairs)):
        predicted = "\t".join(VOCAB.tokens[t] for t in pairs.predictions[i])
        print(f"{prompt_text(pairs.original, i)}\t{prompt_text(pairs.counterfactual, i)}\t{predicted}")
    return 0


def _check_config(args) -> int:
    from vlbind import config as vlconfig

    vlconfig.load(args.files)
    print(f"ok: {' + '.join(args.files)}")
    return 0


def _config_reference(args) -> int:
    from vlbind import config as vlconfig
    from vlbind.core import schema as vlschema
    from vlbind.core.files import atomic_write
    from vlbind.core.settings import read_yaml

    paper = read_yaml(Path(args.paper).read_text())  # as written: the keys it leaves at the schema's default left out
    mini = vlconfig.load([args.paper, args.mini])
    rows = ["| key | meaning | paper | mini | source |", "| --- | --- | --- | --- | --- |"]
    for key, entry in vlschema.reference():
        value, mini_value = (_written(config, key) for config in (paper, mini))
        rows.append(f"| `{key}` | {entry['description']} | {value} | {'same' if mini_value == value else mini_value} "
                    f"| [{entry['source']}] |")
    table = "\n".join(rows) + "\n"
    if args.write is None:
        print(table, end="")
        return 0
    text = Path(args.write).read_text()
    head = text.find(rows[0])
    if head < 0:
        raise ValueError(f"{args.write} has no table to replace (a line {rows[0]!r})")
    atomic_write(Path(args.write), lambda tmp: Path(tmp).write_text(text[:head] + table))  # the table ends the file
    print(f"wrote {len(rows) - 2} keys to {args.write}")
    return 0


def _written(config: dict, key: str) -> str:
    """The table's cell of `key` in `config`: its value as JSON in backticks, `per entry` under a mapping of named
    entries, a task or train key left out: the schema's default, any other left out: "—"."""
    from vlbind.core.schema import schema_defaults

    node = config
    for part in key.split("."):
        if part.startswith("<"):
            return "per entry"
        if part not in node:
            section, _, name = key.partition(".")
            defaults = schema_defaults(section) if section in ("task", "train") else {}
            return f"`{json.dumps(defaults[name])}`" if name in defaults else "—"
        node = node[part]
    return f"`{json.dumps(node)}`"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vlbind", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="print prompts of a stage in the paper's text format")
    s.add_argument("--stage", required=True, help="a stage name of the config, e.g. text_s1 .. text_s5, noise_text")
    s.add_argument("--count", type=int, default=5)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--kind", choices=["retrieval", "grounding"], default="retrieval")
    s.add_argument("--query-by", choices=["color", "shape", "any"], default="color",
                   help="query direction; 'any' follows the stage's symmetric_fraction")
    s.add_argument("--noise", action="store_true",
                   help="insert the stage's noise (100 tokens if it has none), shown as [NOISE]")
    s.add_argument("--counterfactual", action="store_true",
                   help="print interchange pairs (original, counterfactual, five mechanism predictions)")
    s.add_argument("--bank", help="an image bank directory (objects.parquet), for image-context stages")
    s.add_argument("--features", help="that bank's feature file (.npy), for image-context stages")
    s.add_argument("--config", nargs="+", default=[str(DEFAULTS_FILE)],
                   help="config file and overlays, merged left to right (default: the packaged config.yaml, the "
                        "repository's config/config.yaml)")
    c = sub.add_parser("check-config", help="merge and validate config files; print the first error")
    c.add_argument("files", nargs="+", help="config file and overlays, merged left to right")
    r = sub.add_parser("config-reference", help="print config/README.md's table of every config key")
    r.add_argument("--paper", default="config/config.yaml", help="the paper's config (its values: column paper)")
    r.add_argument("--mini", default="config/mini.yaml", help="the overlay of column mini")
    r.add_argument("--write", metavar="FILE", help="replace FILE's table (from its header line to its end) instead")
    args = parser.parse_args(argv)
    try:
        command = {"sample": _sample, "check-config": _check_config, "config-reference": _config_reference}
        return command[args.command](args)
    except (ValueError, FileNotFoundError) as e:  # bad config, arguments or paths: one clear line
        print(f"error: {e}", file=sys.stderr)
        return 2
