"""Starting processes: the only package that does (re-exec with a preloaded allocator, workers)."""
