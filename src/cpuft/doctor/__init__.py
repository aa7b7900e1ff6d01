"""``cpuft doctor``: what this node has, what cpuft will choose on it, and what to fix."""
