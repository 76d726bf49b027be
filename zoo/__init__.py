"""Model definitions (float, QAT-ready) and their registry."""
