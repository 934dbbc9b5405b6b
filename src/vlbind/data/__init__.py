"""The data: prompts of every task (tasks), the rendered objects (render) and the image feature bank (bank)."""
