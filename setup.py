"""Builds the Cython core and the gRPC stubs; everything else lives in pyproject.toml.

The extensions are one table, built in a loop. ``KILTER_NATIVE_DEBUG=1`` turns
bounds and wraparound checks back on for a debugging build.

The gRPC stubs of ``kilter/api/*.proto`` (messages, services, and
their ``.pyi`` for mypy) are generated, never committed: ``build_ext``
(what ``make`` runs in place) and ``build_py`` (what a wheel build runs)
run grpcio-tools' protoc with mypy-protobuf's plugins first, whenever the
.proto is newer than what it made.
"""

import importlib.resources
import os
import platform
import shutil
import sys
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

PROTOS = ("kilter/api/placement.proto", "kilter/api/pool.proto")
STUB_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def _plugin(name: str) -> str:
    """A protoc plugin's script: beside this Python (a venv not on PATH), else on PATH."""
    found = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: install mypy-protobuf (make does)")
    return found


def generate_stubs() -> None:
    """Run protoc on each of PROTOS unless every stub of it is newer than it."""
    root = Path(__file__).resolve().parent
    for name in PROTOS:
        proto = root / name
        outputs = [proto.with_name(proto.stem + suffix) for suffix in STUB_SUFFIXES]
        if not all(out.exists() and out.stat().st_mtime >= proto.stat().st_mtime for out in outputs):
            _protoc(root, proto)


def _protoc(root: Path, proto: Path) -> None:
    from grpc_tools import protoc  # a build requirement, imported only when building

    include = str(importlib.resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{include}",
        f"-I{root}",
        f"--python_out={root}",
        f"--grpc_python_out={root}",
        f"--mypy_out={root}",
        f"--mypy_grpc_out={root}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        str(proto),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {proto}")


class BuildExt(build_ext):
    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:  # the modules compile side by side: a cold `make run` waits for the slowest only
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        generate_stubs()
        super().run()


class BuildPy(build_py):
    def run(self) -> None:
        generate_stubs()
        super().run()


NATIVE_MODULES = ["candidates", "domains", "domainset", "gang", "jsonout", "names", "podsets", "protoview"]

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
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
    ext_modules=cythonize(
        extensions,
        compiler_directives=directives,
        build_dir="build/cython-debug" if debug else "build/cython",
        force=debug,
        nthreads=os.cpu_count() or 1,
        annotate=os.environ.get("KILTER_NATIVE_ANNOTATE") == "1",
    )
)
