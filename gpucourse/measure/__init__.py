"""Running and measuring: the start-up decision, the timing harness, GPU facts, recordings and published data."""
