"""Builds the Cython core; everything else lives in pyproject.toml.

The extensions are one table, built in a loop. ``KILTER_NATIVE_DEBUG=1`` turns
bounds and wraparound checks back on for a debugging build.
"""

import os
import platform

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE_MODULES = ["domains", "domainset", "gang", "jsonout", "names", "protoview"]

debug = os.environ.get("KILTER_NATIVE_DEBUG") == "1"
directives = {
    "language_level": "3",
    "boundscheck": debug,
    "wraparound": debug,
    "initializedcheck": debug,
    "cdivision": not debug,
    "embedsignature": True,
}
compile_args = ["-O0", "-g"] if debug else ["-O3"]
if platform.machine() in ("x86_64", "AMD64"):
    compile_args.append("-mpopcnt")

extensions = [
    Extension(
        f"kilter._native.{name}",
        [f"kilter/_native/{name}.pyx"],
        include_dirs=[numpy.get_include(), "kilter/_native"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args,
    )
    for name in NATIVE_MODULES
]

# Debug and release C live apart so switching never reuses the other's output.
setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=directives,
        build_dir="build/cython-debug" if debug else "build/cython",
        force=debug,
        annotate=os.environ.get("KILTER_NATIVE_ANNOTATE") == "1",
    )
)
