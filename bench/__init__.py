"""kilter's benchmarks: one module per measured target, numbers written to bench/results/."""
