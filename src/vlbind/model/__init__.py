"""The model: the transformer and its projector (transformer), the hook API (hooks), safetensors checkpoints
(checkpoint), batched answers and scores (inference)."""
