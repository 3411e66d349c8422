"""The PAIQ_* settings: one model, read from an injected mapping only."""
