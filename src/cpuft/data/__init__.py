"""Data: task specs, table loading, label maps, tokenisation, batching and padding."""
