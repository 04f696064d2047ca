"""The `curi` command: `curi <subcommand> [key=value ...]`. Each subcommand is a Hydra app whose
primary config is `<subcommand>.yaml` of the installed configuration package (`pkg://curi.conf`,
the repository's `conf/`); subcommands are found through the `curi.commands` entry points, so
the core never imports the layers above it."""

from __future__ import annotations

import logging
import sys
from importlib.metadata import entry_points

from curi.errors import CuriError
from curi.presets import CONF_PACKAGE, conf_dir

__all__ = ["main"]

log = logging.getLogger("curi")


def _commands() -> dict:
    return {ep.name: ep for ep in entry_points(group="curi.commands")}


def _usage(commands: dict) -> str:
    lines = ["usage: curi <command> [key=value ...] [--help] [-m]", "", "commands:"]
    for name, ep in sorted(commands.items()):
        try:
            doc = (ep.load().__doc__ or "").strip().splitlines()
        except ImportError as e:  # a broken install of one layer must not hide the others
            doc = [f"(unavailable: {e})"]
        lines.append(f"  {name.replace('.', ' '):<16} {doc[0] if doc else ''}")
    lines += ["", "`curi <command> --help` lists a command's options and config groups."]
    return "\n".join(lines)


def _run(name: str, fn, cfg) -> None:
    try:
        fn(cfg)
    except CuriError as e:
        print(f"curi {name.replace('.', ' ')}: error: {e}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `curi` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = _commands()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage(commands))
        return
    name, rest = argv[0], argv[1:]
    if rest and f"{name}.{rest[0]}" in commands:  # nested: `curi episodes render ...`
        name, rest = f"{name}.{rest[0]}", rest[1:]
    if name not in commands:
        print(f"curi: unknown command {name!r}\n\n{_usage(commands)}", file=sys.stderr)
        sys.exit(2)
    fn = commands[name].load()
    try:
        conf_dir()  # a broken install fails here with one message, not inside Hydra
    except CuriError as e:
        print(f"curi: error: {e}", file=sys.stderr)
        sys.exit(2)
    import hydra

    def task(cfg) -> None:
        _run(name, fn, cfg)

    config_name = name.replace(".", "_")  # `episodes.render` -> episodes_render.yaml
    app = hydra.main(
        config_path=f"pkg://{CONF_PACKAGE}", config_name=config_name, version_base="1.3"
    )(task)
    # the job name names the run's log file (<command>.log beside .hydra/)
    sys.argv = [f"curi {name.replace('.', ' ')}", *rest, f"hydra.job.name={config_name}"]
    app()
