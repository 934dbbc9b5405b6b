"""Snakemake adapter: Figure 7, a sheet of example renderings from the image bank."""
from pathlib import Path

import pandas as pd

from vlbind import figures
from vlbind.core.logs import setup_logging

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
figures.fig7(pd.read_parquet(sm.input.objects), Path(sm.input.images), sm.output.pdf)
log.info("wrote %s", sm.output.pdf)
