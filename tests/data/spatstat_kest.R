# spatstat's Kest (none, translation, isotropic, border) on spatstat.data patterns, written as CSV.
# Regenerate the recorded numbers the tests compare against (needs R, spatstat and spatstat.data):
#   Rscript tests/data/spatstat_kest.R tests/data/spatstat_kest.csv redwood japanesepines swedishpines cells finpines lansing bei
# Radii: 0 and 25 values up to a quarter of the window's short side, stretched by (1 + sqrt(2) 1e-6) so that no
# pair distance or boundary distance of these rounded-coordinate patterns equals a radius: spatstat bins distances
# in left-closed intervals (counts d < r) where workbench counts d <= r, so exact ties would test that convention
# instead of the estimators (the test checks the radii are tie-free).
suppressPackageStartupMessages(library(spatstat))
args <- commandArgs(trailingOnly = TRUE)
out <- args[1]
rows <- list()
for (name in args[-1]) {
  X <- get(name)
  W <- Window(X)
  rmax <- 0.25 * min(diff(W$xrange), diff(W$yrange))
  r <- c(0, seq(0, rmax, length.out = 26)[-1] * (1 + sqrt(2) * 1e-6))
  K <- as.data.frame(Kest(unmark(X), r = r, correction = c("none", "translate", "isotropic", "border")))
  rows[[name]] <- data.frame(dataset = name, n = npoints(X), r = K$r, none = K$un, translation = K$trans,
                             isotropic = K$iso, border = K$border)
}
res <- do.call(rbind, rows)
header <- sprintf("# spatstat %s (spatstat.explore %s, spatstat.data %s), R %s",
                  packageVersion("spatstat"), packageVersion("spatstat.explore"), packageVersion("spatstat.data"),
                  getRversion())
writeLines(header, out)
suppressWarnings(write.table(format(res, digits = 17), out, sep = ",", row.names = FALSE, quote = FALSE,
                             append = TRUE))
