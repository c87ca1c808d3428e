# syntax=docker/dockerfile:1
# TableTune sidecar: `tabletune sidecar` next to each vLLM (scrape -> estimate -> rebuild -> push).
#
# Only the package's core dependencies (aiohttp, prometheus-client, numpy, pydantic,
# pydantic-settings, tenacity): no vLLM, no torch, no `cpu`/`gpu` extra.
#
# Build from the repository root (deploy/sidecar.Dockerfile.dockerignore keeps .venv etc. out):
#   docker build -f deploy/sidecar.Dockerfile -t tabletune/sidecar:0.1.0 .
# Run next to a vLLM on the same host (flags or TABLETUNE_SIDECAR_* variables, see --help):
#   docker run --network host -v $PWD/profile.json:/profile.json:ro tabletune/sidecar:0.1.0 \
#     --profile /profile.json --dry-run

ARG PYTHON_VERSION=3.12
ARG DEBIAN_RELEASE=bookworm

FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS wheel
ARG SETUPTOOLS_VERSION=80.9.0
WORKDIR /src
RUN pip install --no-cache-dir "setuptools==${SETUPTOOLS_VERSION}"
COPY pyproject.toml README.md ./
COPY tabletune/ tabletune/
COPY tuner/ tuner/
COPY sidecar/ sidecar/
COPY vllm_patch/ vllm_patch/
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE}
ARG UID=10001
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 \
    OPENBLAS_NUM_THREADS=1 \
    TABLETUNE_SIDECAR_LISTEN_HOST=0.0.0.0 \
    TABLETUNE_SIDECAR_LISTEN_PORT=9109
RUN useradd --uid "${UID}" --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin tabletune \
    && install -d -o "${UID}" -g "${UID}" /var/lib/tabletune
COPY --from=wheel /wheels/ /tmp/wheels/
# The wheel's own dependency ranges (pyproject.toml [project].dependencies) pick the versions.
RUN pip install --no-cache-dir /tmp/wheels/*.whl && rm -rf /tmp/wheels \
    && tabletune sidecar --help > /dev/null
USER ${UID}:${UID}
WORKDIR /var/lib/tabletune
EXPOSE 9109
# Liveness of the sidecar process only (never the engine's): the port follows the variable.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TABLETUNE_SIDECAR_LISTEN_PORT', '9109'), timeout=4)"]
ENTRYPOINT ["tabletune", "sidecar"]
