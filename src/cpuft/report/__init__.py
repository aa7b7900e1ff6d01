"""``cpuft report``: markdown and pictures from finished run folders. Torch-free."""
