"""Reading trained models out: accuracy by length (evaluate), what a run's tables say about it (outcomes), tables over
runs (tables), the paper's claims checked on them (claims). No torch but in evaluate."""
