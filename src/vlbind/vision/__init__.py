"""The vision arm: frozen timm encoders and feature extraction (encoders), the DAG's own encoder pretraining
(pretrain)."""
