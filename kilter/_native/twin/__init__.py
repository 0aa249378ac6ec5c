"""Plain-Python reference twin of the Cython core, for tests and benchmarks only.

One module per .pyx, same names and signatures. Never imported by production
code (an import-linter contract enforces it) and never a fallback.
"""
