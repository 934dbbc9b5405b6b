"""Every stage and variant name has one declaration (vlbind.core.stages); what else names them is derived from it or
checked here, so that a new name missing anywhere fails one test. Analyses: vlbind.interp.ANALYSES, checked in
test_interp."""

import re
from pathlib import Path

import pytest

from vlbind import config as vlconfig
from vlbind.core import schema as vlschema
from vlbind.core import stages
from vlbind.evaluation import claims, tables

ROOT = Path(__file__).resolve().parents[1]


def test_the_schema_and_the_tables_read_their_names_from_vlbind_stages():
    schema = vlschema.schema()
    assert schema["definitions"]["variant"]["enum"] == list(stages.VARIANT_STAGE) == tables.VARIANT_ORDER
    sections = schema["properties"]["stages"]["properties"]
    assert set(sections) == set(stages.STAGE_PARENTS) - set(stages.CURRICULUM) - set(stages.NOISE_CONTROL)
    assert {s for s, ref in sections.items() if ref["$ref"].endswith("control_stage")} == set(stages.CONTROLS)
    # the file itself lists no variant or stage name: a new one needs no edit there
    text = (ROOT / "src/vlbind/config.schema.yaml").read_text()
    for name in [*stages.VARIANT_STAGE, *stages.STAGE_PARENTS]:
        assert not re.search(rf"(^|[\s\[,]){name}(:|,|\])", text, re.M), name


def test_a_variant_or_stage_named_nowhere_in_vlbind_stages_is_refused_by_the_schema():
    base = vlconfig.load([ROOT / "config/config.yaml"])
    with pytest.raises(vlconfig.ConfigError, match="text_only_typo"):
        vlconfig.validate({**base, "variants": ["text_only_typo"]})
    with pytest.raises(vlconfig.ConfigError, match="text_s9"):
        vlconfig.validate({**base, "stages": {**base["stages"], "text_s9": {"task": {}}}})


def test_the_claims_name_only_declared_variants_and_every_variant_has_a_claim():
    groups = (claims.PAPER_COMPARISONS, claims.CURRICULUM_COMPARISONS, claims.BIND_LOSS_COMPARISONS,
              claims.NOISE_CONTROL_COMPARISONS)
    compared = {name for group in groups for row in group for name in row[:2]}
    assert compared <= set(stages.VARIANT_STAGE)
    arms = [*claims.TEXT_ARM, *claims.IMAGE_ARM, *claims.CURRICULUM_ARM, *claims.BIND_LOSS_ARM,
            *claims.NOISE_CONTROL_ARM]
    assert sorted(arms) == sorted(set(stages.VARIANT_STAGE) - {"text_bind_shuffled"})  # each in one arm
    source = (ROOT / "src/vlbind/evaluation/claims.py").read_text()
    for variant in stages.VARIANT_STAGE:
        assert f'"{variant}"' in source, f"no claim reads {variant}"


def test_every_variant_is_a_stage():
    assert set(stages.VARIANT_STAGE.values()) <= set(stages.STAGE_PARENTS)
