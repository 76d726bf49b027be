"""Primitive differentiable ops: each a Function with forward and backward on numpy arrays.

Everything else in `tianyuan.functional` is a composition of these.
"""
