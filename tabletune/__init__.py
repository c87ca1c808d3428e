"""TableTune's application layer: the `tabletune` command and the demo, above tuner/, sidecar/ and
vllm_patch/ (every import here points down; nothing below imports this package)."""
