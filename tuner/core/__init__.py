"""The base layer: what sidecar/ and vllm_patch/ share with the tuner, and nothing above it.

Engine-safe (stdlib + pydantic only; the plugin imports them inside the vLLM engine process):
errors, files, table, admin_api. The rest may use numpy and aiohttp: engine_client, scrape,
profile, samples, goodput, confidence, monotone, intervals, graphs, recommend, workload,
incumbent.
tests/test_layers.py holds both rules. Like every __init__.py here, this one imports nothing.
"""
