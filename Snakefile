# vlbind: the paper's results as one DAG. See README.md.
from pathlib import Path

import pandas as pd
from snakemake.utils import min_version

from vlbind.evaluation.tables import run_summary

min_version("8.0")


# beside the Snakefile, so that `snakemake --directory DIR` (an experiment in a results tree of its own) finds it
configfile: Path(workflow.basedir) / "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/vision.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/interp.smk"
include: "workflow/rules/qwen.smk"


rule all:
    default_target: True
    input:
        rules.accuracy_figures.output,
        rules.fig7.output.pdf,
        rules.ood_table.output.csv,
        rules.training_table.output.csv,
        rules.circuits.output.csv,
        rules.claims.output.csv,
        rules.interp_figures.output,


onsuccess:
    if Path(rules.ood_table.output.csv).exists():
        print(run_summary(pd.read_csv(rules.ood_table.output.csv)))
