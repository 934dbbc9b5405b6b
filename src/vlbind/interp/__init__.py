"""Mechanistic analyses of trained models (paper, section 5; appendices F, G): interchange interventions,
attention knockouts, linear probes and layer relevance. All run on text prompts, queried by color."""
