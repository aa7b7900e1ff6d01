"""``cpuft bench``: cpuft against the stock ways, side by side in one run."""
