"""Snakemake adapter: Table 1 (peak layer, symbolic/positional ratios, VLM - LLM) from every model's interchange."""
import pandas as pd

from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.params import job_section
from vlbind.qwen.binding import BindingConfig, table1

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
table = table1(pd.concat([pd.read_parquet(p) for p in sm.input.tables], ignore_index=True),
               BindingConfig.from_dict(job_section(sm.params.binding, sm.config, "qwen.binding")))
atomic_write(sm.output.csv, lambda tmp: table.to_csv(tmp, index=False))
log.info("wrote %s:\n%s", sm.output.csv, table.to_string())
