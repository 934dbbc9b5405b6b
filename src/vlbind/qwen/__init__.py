"""Pretrained LLM vs VLM experiments on Qwen models (paper, sections 2, 5.6, 6.3; appendices A, B, H)."""
