"""Named presets shipped inside the package: the YAML files of `conf/` (installed as
`curi.conf`), read through the installed package, never from a source checkout."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from curi.errors import ConfigError, did_you_mean

__all__ = ["CONF_PACKAGE", "conf_dir", "list_presets", "load_preset"]

CONF_PACKAGE = "curi.conf"


def conf_dir() -> Path:
    """The installed configuration folder (Hydra's ``pkg://curi.conf``)."""
    path = Path(str(files(CONF_PACKAGE)))
    if not path.is_dir():  # a broken install: say so rather than fail later
        raise ConfigError(f"curi's configuration is missing from the installed package ({path})")
    return path


def list_presets(group: str) -> list[str]:
    """Names of the presets of a config group (``bank``, ``split``, ``train``, ...)."""
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


def load_preset(group: str, name: str) -> dict:
    """The preset `name` of config group `group` as a plain dict.

    Raises:
        ConfigError: an unknown name (the message lists the known ones), or invalid YAML.
    """
    import yaml

    known = list_presets(group)
    if name not in known:  # also refuses paths: only the folder's own file names match
        hint = did_you_mean(name, known)
        raise ConfigError(f"unknown {group} {name!r}{hint}; known: {', '.join(known)}")
    path = conf_dir() / group / f"{name}.yaml"
    try:
        cfg = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{group} preset {name!r} is not valid YAML: {e}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{group} preset {name!r} is not a mapping")
    return cfg
