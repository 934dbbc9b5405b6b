"""Training one stage: its settings (config), the loop (loop), the retry rule (attempts), the losses, the optimiser and
its schedule (optim), resumable state (resume)."""
