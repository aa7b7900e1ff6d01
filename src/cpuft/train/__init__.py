"""Training: the loop for any nn.Module (``fit``), checkpoints, evaluation, and the train job."""
