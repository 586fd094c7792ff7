"""Peer runners: the single-node libraries a user would otherwise pick, run on
the same input as a workbench kernel (one module per kernel).

This package sits in the benchmarking layer, above the kernels: a kernel
module does not know how it is benchmarked.
"""
