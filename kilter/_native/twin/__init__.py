"""Plain-Python reference twin of the Cython core, for tests and benchmarks only.

One module per .pyx, same names and signatures; candidates.pyx, which
prepares domainset.pyx's search and has no Python names, is part of the
twin's domainset. Never imported by production code (an import-linter
contract enforces it) and never a fallback.
"""
