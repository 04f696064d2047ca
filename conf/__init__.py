"""The Hydra configuration of every `curi` command, shipped as package data (`curi.conf`)."""
