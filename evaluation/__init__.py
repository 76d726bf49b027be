"""Metrics, quantization reports and speed/memory measurement."""
