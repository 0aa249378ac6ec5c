# syntax=docker/dockerfile:1
# kilter's image: `make image` (a container engine needed), the wheel `make build` makes, installed alone.
#
# Stage 1 compiles the wheel (the Cython core and the gRPC stubs inside); stage 2 installs that wheel and its
# dependencies into a virtual environment; the runtime stage copies only that environment onto the same pinned
# base, runs as a non-root numeric user and needs no shell: the entrypoint is the `kilter` console script, in
# exec form. The Deployments mount /tmp (an emptyDir) and keep the root filesystem read-only; nothing is written
# elsewhere (no bytecode, matplotlib's cache under /tmp). tests/packaging checks this file, and runs the wheel as
# this image would, without an engine.

ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
RUN pip install --no-cache-dir "setuptools>=69" "Cython>=3.0.10,<4" "numpy>=2.0" wheel build \
        "grpcio-tools>=1.85.1,<1.86" "mypy-protobuf>=5.0"
COPY . .
RUN python -m build --no-isolation --wheel --outdir /dist .

FROM ${PYTHON_IMAGE} AS install
COPY --from=wheel /dist/ /dist/
RUN python -m venv /opt/kilter && /opt/kilter/bin/pip install --no-cache-dir /dist/kilter-*.whl

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kilter" \
      org.opencontainers.image.description="Fair-share quota and NVLink/xGMI/UALink-aware gang placement for Kueue and Volcano" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=install /opt/kilter /opt/kilter
ENV PATH=/opt/kilter/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
USER 65532:65532
EXPOSE 8888 9443 9090
ENTRYPOINT ["/opt/kilter/bin/kilter"]
CMD ["serve", "--in-cluster"]
