"""A device kernel for the simulator tests: module level, as numba's simulator
needs (it swaps the module's ``cuda`` global for its fake one at launch)."""

from numba import cuda

PTX_SIGNATURES = {"axpy": ["void(float64, float64[::1], float64[::1], float64[::1])"]}


@cuda.jit
def axpy(a, x, y, out):
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[i] = a * x[i] + y[i]
