"""Tooling for tests and benchmarks that need a cluster on one machine: namespaced hosts
(``netns``). No torch here."""
