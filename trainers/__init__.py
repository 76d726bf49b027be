"""Training loops, hydra recipes and the `tianyuan` command line."""
