"""Datasets, transforms, DataLoader and samplers."""
