"""The tridiagonal solver's constants: block sizes, the fused pass's tile, window and halos, tolerances.

Shared by the client side (``__init__``), the SPMD rank bodies (``ranks``) and the local kernels
(``cpu``, ``cuda``), which import them from here so the package has no import cycle."""

from __future__ import annotations

#: Sixth-order compact first derivative (Lele 1992): alpha, a, b.
COMPACT6 = (1.0 / 3.0, 14.0 / 9.0, 1.0 / 9.0)

#: Rows per sub-block the grid aims for: one system's sub-blocks are swept
#: interleaved (ILP), so long ones keep the reduced system small and the
#: sweeps' streams long (a single 2^24 system: 0.36 s at 512 rows, 0.26-0.28 s
#: at 8192, 2 workers here); a few systems (2-7) keep 512 so a sub-block's
#: tile stays in L2; a batch's sub-blocks are swept over wide tiles of
#: systems, so short ones keep a tile (sub-block x systems x four inputs) in
#: cache between the two sweeps.
_BLOCK_ROWS_SINGLE = 8192
_BLOCK_ROWS = 512
_BLOCK_ROWS_BATCH = 64
#: Systems per tile of a batch sweep: wide rows stream (prefetch, few TLB misses).
_TILE_SYSTEMS = 1024
#: Fused single pass (batches, one right-hand side): systems per tile, rows per back-substitution
#: window, and the halo: rows below a window (and rows at a block's edges) over which the
#: neighbours' influence must decay below rounding (checked; otherwise the two-pass path runs).
#: The halo is sized per solve from the decay measured on the line's first rows: 32 rows for the
#: benchmark's random systems, 48 for the sixth-order compact scheme (alpha = 1/3: |c'| -> 0.38);
#: each 16 rows more cost ~10% here.
_FUSED_TILE = 2048
#: Systems per panel of the fused pass on the (batch, n) layout: one block of the line (~680 rows at n = 4096)
#: of a panel's four inputs, transposed line-major, stays in L2 while it is solved; eight 8-wide vectors per
#: row keep the elimination's dependency chains overlapped (on short blocks 32-96 run alike here; 128 is 5-30%
#: slower; long blocks take fewer, below).
_BATCH_PANEL = 64
#: ... and no more than a block's four inputs in this many bytes of panel (16 systems x 683 rows take 350 KB):
#: blocks grow with the line (up to _FUSED_ROWS), and a long block's 64-system panel falls out of cache.  One
#: rank's share, in seconds by panel width (in twelfths of the line): 8192 systems of 8192, 0.139-0.146 at 64 and
#: 0.127 at 32; 4096 of 16384, 0.139 at 64, 0.128 at 32 and 0.135 at 16; 1024 of 65536, 0.221 at 64 and 0.138 at
#: 16 or 8.  Same bits at every width.  The README call (16384 x 4096, 2 workers, widths interleaved in one
#: cluster, slow-memory state, twelfths): 0.347 s at 64, 0.325 at 48, 0.309 at 32; 8192 x 8192: 0.322 at 32,
#: 0.307 at 16; short lines keep 64 (1024: 0.175 against 0.197 at 32; 256: 0.231 against 0.275).
_BATCH_PANEL_BYTES = 3 << 17
_FUSED_WINDOW = 64
#: Columns ahead that the (batch, n) panel loads prefetch on each row: the rows' segments in a block are short
#: (a few hundred columns) for the hardware prefetcher to ramp up on (64: one rank's share 2-10% faster).
_PREFETCH_COLUMNS = 64
_FUSED_HALOS = (32, 40, 48, 56, 64)
#: Rows the decay probe averages over (after a transient), and its safety margin on the halo's product.
_PROBE_ROWS = (16, 80)
_PROBE_MARGIN = 1e-3
#: Blocks of the fused pass per line come in multiples of 12 (the grid's sub-blocks grouped: equal shares for 1-4,
#: 6, 12 workers), or 6 where sixths are short enough, and the coarser cuts a line too short for sixths takes,
#: finest first (see __init__._fused_grid) ...
_FUSED_BLOCKS = 12
_FUSED_COARSER = (6, 4, 2, 1)
#: ... and of the fewest blocks no longer than this: each block pays for its edges (the coupling columns of its
#: first and last H rows, the interface), while past this many rows a gtsv panel holds 8 systems (_BATCH_PANEL_BYTES),
#: one vector.  One rank's share of (16384, 4096) (batch, n) in one process (medians of 5): 0.146 s in blocks of
#: 341 rows, 0.138 in 512 or 683, 0.165 in 1024; of (4096, 16384): 0.169 in 341, 0.154 in 683, 0.175 in 1365.
#: The README call (2 workers, medians of 3 x 4): 0.184 s in twelfths (341 rows), 0.168 in sixths (683); 4096 x
#: 16384: 0.199 in twelfths (1365), 0.181 in 24ths (683).  The line-major pass runs alike in either.
_FUSED_ROWS = 768
#: Rows a rank solves in the time one row (the four inputs' columns) moves to it from a neighbour's chunk
#: (~13 here: 2 workers, (16384, 4096) chunked (16384, 3000)); a rank edge follows the caller's chunk edge to
#: the nearest edge of the fused pass's blocks while the rows it then need not borrow outweigh the imbalance at
#: this rate.
_MOVE_COST = 8
#: A dask input in fewer chunks (along the line, or rows of chunks along the batch) than there are workers
#: takes a rank per chunk once a worker's share of the inputs reaches this: a rank without a chunk of its
#: own would borrow all its rows on every call (3 workers on (16384, 4096) in two chunks along the line:
#: 0.56-1.37 s a call, 0.20-0.24 s on two).  Below it the rows moved cost about a group's round trip,
#: and every worker takes a share.
_SPREAD_BYTES = 16 << 20
#: Truncate the reduced system when every dropped coupling is below this.
_TRUNC_TOL = 2.0 ** -53
#: Dropped couplings past this (half the digits) make an explicit reduced='truncated' warn.
_TRUNC_WARN = 2.0 ** -26
#: Scale for the finiteness accumulator: large finite entries must not overflow it (the numba kernels
#: read it as a compile-time constant).
_CHK_SCALE = 2.0 ** -80
_REDUCED = ("auto", "exact", "truncated")
_ENGINES = ("auto", "numba", "array")
#: The halo placeholder that asks the ranks to probe the matrix (the client caches the verdict).
_PROBE = "probe"
