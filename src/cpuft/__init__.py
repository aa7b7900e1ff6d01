"""cpuft: fast fine-tuning of PyTorch models on CPU servers and CPU clusters."""

__version__ = "0.1.0"
