"""Memory: training beside inference like with like, and the memory frontier (the largest model that fits), each
with its figure."""
