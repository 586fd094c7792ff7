"""One module per kernel: the distributed algorithm, its validation, its local kernels."""
