"""torch.distributed for training: the only package that touches process groups."""
