"""Per-rank shards of real training stacks (reference, Hugging Face, Megatron-Core) to trace."""
