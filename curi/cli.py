"""The `curi` command: `curi <subcommand> [key=value ...]`. Each subcommand is a Hydra app whose
primary config is `<subcommand>.yaml` of the installed configuration package (`pkg://curi.conf`,
the repository's `conf/`); subcommands are found through the `curi.commands` entry points, so
the core never imports the layers above it. The primary config is also the command's schema
(`curi.options`): overrides and the composed config are checked against it, and `--help` is
written from its comments. Every job's config is composed (`curi.compose_cli`) and checked,
with the command's own check (`curi.validate.checked`), before Hydra makes a run folder and
before the command imports torch or opens a bank: a refused command leaves nothing behind.
The run's record in its run folder (``.hydra/``) is written by curi, not Hydra (`RunRecord`),
so a command that refuses the folder later (other settings, a lock held) leaves the record of
the run that made it."""

from __future__ import annotations

import contextlib
import errno
import logging
import re
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

from curi.atomic import write_text
from curi.errors import ConfigError, CuriError, did_you_mean
from curi.options import (
    Options,
    check_config,
    check_group_values,
    check_override_keys,
    help_text,
    is_split_file,
    load_options,
    summary,
)
from curi.paths import as_folder, foreign, output_path
from curi.presets import CONF_PACKAGE, conf_dir

__all__ = ["main"]

log = logging.getLogger("curi")


def _commands() -> dict:
    return {ep.name: ep for ep in entry_points(group="curi.commands")}


def _usage(commands: dict) -> str:
    """The list of commands, each with the first sentence of its config's help header: no
    layer is imported to write it (a layer is imported only when its command runs)."""
    lines = ["usage: curi <command> [key=value ...] [--help] [-m]", "", "commands:"]
    for name in sorted(commands):
        try:
            about = summary(name.replace(".", "_"))
        except CuriError as e:  # one broken config must not hide the other commands
            about = f"(unavailable: {e})"
        lines.append(f"  {name.replace('.', ' '):<16} {about}".rstrip())
    lines += [
        "",
        "`curi <command> --help` lists a command's options and config groups;",
        "`curi --version` prints the installed version.",
    ]
    return "\n".join(lines)


def _version() -> str:
    """``curi <version>`` of the installed distribution."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"curi {version('curi')}"
    except PackageNotFoundError:  # run from a checkout that is not installed
        from curi import __version__

        return f"curi {__version__} (not installed)"


def _fail(name: str, e: CuriError | str) -> None:
    print(f"curi {name.replace('.', ' ')}: error: {e}", file=sys.stderr)
    sys.exit(2)


# Errors of the machine, not of curi or the config: every file is written under a temporary
# name and renamed when whole (`curi.atomic`), so nothing is lost and one line is enough.
_STORAGE = {
    errno.EFBIG: "the disk is full or a file size limit was hit",
    errno.ENOSPC: "the disk is full or a file size limit was hit",
    errno.EDQUOT: "the disk is full or a file size limit was hit",
    errno.ENAMETOOLONG: "a file name is too long for the file system",
}


def _storage_error(error: Exception, cfg) -> str | None:
    """One line for an `OSError` of the disk (full, a file size limit, a name too long), or an
    error raised while handling one (torch's `RuntimeError` when a checkpoint's write fails),
    naming the file, else the output the command writes (``out=``, ``output_dir=``); None for
    another error. Python ignores SIGXFSZ, so a file size limit (``ulimit -f``) is an EFBIG
    here, not the end of the process."""
    e = error
    while e is not None and not (isinstance(e, OSError) and e.errno in _STORAGE):
        e = e.__cause__ or e.__context__
    if e is None:
        return None
    why = _STORAGE[e.errno]
    keys = ("out", "output_dir", "data_dir")
    where = e.filename or next((f"{k}={cfg[k]}" for k in keys if cfg.get(k)), "a file")
    return f"could not write {where}: {why} ({e.strerror})"


def _value_of(rest: list[str], key: str) -> str | None:
    """The last plain value given to `key` (``key=``, ``+key=``, ``++key=``), or None."""
    found = None
    for text in rest:
        k, eq, v = text.lstrip("+").partition("=")
        if eq and k == key:
            found = v
    return found


def _quote(text: str) -> str:
    """`text` as one quoted value of a Hydra override: a quote, and the backslashes before a
    quote or the end, are escaped (Hydra's grammar); an interpolation in it stays one."""
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    return "'" + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text) + "'"


def _literal(text: str) -> str:
    """`text` quoted so that it reaches the config as written: each ``${`` is escaped
    (OmegaConf's ``\\${``), so a name read from a file is never resolved as an interpolation
    (``${oc.env:TOKEN}`` would copy the variable into reports and logs)."""
    return _quote(re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text))


def _split_file(value: str) -> str:
    """The inline ``file`` rule reading the split file `value`, its name and path literal,
    once the file reads as a split file (`curi.splits.saved.check_split_file`: a bad one is
    refused here, before Hydra makes a run folder)."""
    from curi.splits.saved import check_split_file

    path = Path(value).expanduser().absolute()
    name = str(check_split_file(path)["name"])
    return f"{{name: {_literal(name)}, rule: file, path: {_literal(str(path))}}}"


def _group_values(rest: list[str], opts: Options) -> list[str]:
    """Overrides of a config group that are not a preset's name, made the config they mean
    (Hydra alone would look for a preset of that name, or merge into the preset):
    ``GROUP={...}``, an inline config, replaces the preset; ``split=FILE.json`` (a split saved
    by ``curi split ... save=FILE.json``) becomes the ``file`` rule reading it."""
    out = []
    for text in rest:
        key, eq, value = text.partition("=")
        group = opts.groups.get(key, (None,))[0] if eq else None
        if group == key and value.startswith("{") and value.endswith("}"):
            out += [f"~{key}", f"+{key}={value}"]
        elif group == key == "split" and "," not in value and is_split_file(value):
            out += ["~split", f"+split={_split_file(value)}"]
        else:
            out.append(text)
    return out


# Commands that plan their own jobs (`curi.jobs`): a Hydra sweep (-m) of them would launch
# launchers; the exports plan jobs when given jobs=N.
_PLANS_JOBS = ("baselines", "baselines.collect", "curve", "curve.collect")
_PLANS_JOBS_WITH = {"episodes": "jobs", "episodes.render": "jobs"}


def _check_jobs(name: str, rest: list[str]) -> None:
    """Refuse ``-m`` with a command that plans jobs, and a ``hydra/launcher`` that is not
    installed (naming the extra) or lacks a ``hydra.launcher.*`` option given, before Hydra
    runs (`curi.jobs.check_launcher`, with the options' names: their values are Hydra's)."""
    from curi.jobs import check_launcher

    key = _PLANS_JOBS_WITH.get(name)
    plans = name in _PLANS_JOBS or (key is not None and _value_of(rest, key) not in (None, "1"))
    if plans and ("-m" in rest or "--multirun" in rest):
        raise ConfigError(
            f"curi {name.replace('.', ' ')} runs its own jobs: choose where with "
            "hydra/launcher=NAME, without -m"
        )
    launcher = _value_of([t.removeprefix("override ") for t in rest], "hydra/launcher")
    keys = {
        k.lstrip("+").removeprefix("hydra.launcher.").split(".")[0]
        for k, eq, _ in (t.partition("=") for t in rest)
        if eq and k.lstrip("+").startswith("hydra.launcher.")
    }
    check_launcher("basic" if launcher is None else launcher, keys)


def _run_dir(rest: list[str], opts: Options) -> list[str]:
    """Where the run's config and log go: output_dir= when given; else Hydra's run folder for a
    command whose output_dir defaults to it; else (bank, split, ...) no run folder at all."""
    given = {t.split("=", 1)[0] for t in rest if "=" in t}
    out = _value_of(rest, "output_dir")
    if out not in (None, "null") and "," not in out:
        extra = [f"hydra.run.dir={_quote(out)}", f"hydra.sweep.dir={_quote(out)}"]
        return [e for e in extra if e.split("=", 1)[0] not in given]
    sweep = "-m" in rest or "--multirun" in rest  # a sweep keeps its record (multirun/...)
    if opts.defaults.get("output_dir") is None and "hydra.run.dir" not in given and not sweep:
        return ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=console"]
    return []


def _prepare(cfg, fn, opts: Options, output_dir_given: bool) -> None:
    """Check a job's composed config (`cfg`, without its hydra node, while `HydraConfig`
    holds that node) against the command's schema, its data folder and the command's own
    check (`curi.validate.checked`); a value made a one-item list is written back, a sweep
    job's output_dir becomes its own folder, and progress bars are drawn on a terminal only
    (never into a log)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import MissingMandatoryValue, OmegaConf, open_dict

    from curi.compose_cli import resolved

    plain = resolved(cfg)
    checked = check_config(plain, opts)
    raw = OmegaConf.to_container(cfg, resolve=False)  # a resolved value is not re-read
    with open_dict(cfg):
        for key, value in checked.items():
            if value != plain[key]:  # a value made a one-item list
                cfg[key] = [raw[key]] if value == [plain[key]] else value
        if output_dir_given and "output_dir" in cfg:  # a sweep job: its own folder
            cfg.output_dir = HydraConfig.get().runtime.output_dir
        if "progress" in cfg and not sys.stderr.isatty():
            cfg.progress = False
    if plain.get("data_dir") is not None:
        as_folder(plain["data_dir"], "data_dir")
    if isinstance(plain.get("output_dir"), str) and not plain["output_dir"].strip():
        as_folder(plain["output_dir"], "output_dir")  # empty: the working folder, never meant
    check = getattr(fn, "check", None)
    if check is not None:
        try:
            check(cfg)
        except MissingMandatoryValue as e:  # a ``???`` the check did not ask for by name
            raise ConfigError(f"{e.full_key}= is required; `--help` says what it takes") from None


def _precheck(config_name: str, overrides: list[str], fn, opts: Options, given: bool) -> str | None:
    """Check every job's config and the run folder Hydra would make for it (one that
    cannot be written is refused), before Hydra makes any. Returns the folder of the run's
    record in its run folder (``hydra.output_subdir``, ``.hydra``), None when none is kept."""
    from hydra.core.hydra_config import HydraConfig

    from curi.compose_cli import job_configs, run_folder

    record = None
    for cfg in job_configs(config_name, overrides):
        folder = run_folder()
        if folder is not None:
            output_path(folder, folder=True, key="output_dir")
            record = HydraConfig.get().output_subdir
            RunRecord.check(Path(folder) / record)
        _prepare(cfg, fn, opts, given)
    return record


class RunRecord:
    """A run's record in its run folder (``.hydra/``: ``config.yaml``, ``hydra.yaml``,
    ``overrides.yaml``, as Hydra writes them), written by curi instead of Hydra, which writes it
    before the command's function runs: a run the command refuses (a folder finished with
    other settings, a run of other settings, a sweep another process holds) rewrote the
    record of the run that made the folder. Here the record is written at the start only into
    a folder that has none (a run killed later keeps it), else once the command has ended
    without refusing the folder; each file atomically (`curi.atomic`)."""

    def __init__(self, cfg, subdir: str) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        hydra = OmegaConf.to_container(HydraConfig.get(), resolve=False)
        hydra["output_subdir"] = subdir  # as Hydra would have kept it, not curi's null
        hydra["overrides"]["hydra"].remove(_NO_SUBDIR)  # curi's, not the user's
        self.folder = Path(HydraConfig.get().runtime.output_dir) / subdir
        self.texts = {  # now: the command's check may write normalised values into cfg
            "config.yaml": OmegaConf.to_yaml(cfg),
            "hydra.yaml": OmegaConf.to_yaml({"hydra": hydra}),
            "overrides.yaml": OmegaConf.to_yaml(hydra["overrides"]["task"]),
        }

    @staticmethod
    def check(folder: Path) -> None:
        """Refuse a record folder that is a symlink or not a folder (never written through)."""
        found = foreign(folder, folder=True, cannot=f"cannot keep the run's config in {folder}")
        if found is not None:
            what = f"a symlink to {found.target}" if found.target is not None else "not a folder"
            raise ConfigError(
                f"the run's config goes to {folder}, which is {what}; give another output_dir"
            )

    def write(self, *, first: bool = False) -> None:
        """Write the record; with `first`, only into a folder that holds none yet."""
        if first and (self.folder / "config.yaml").exists():
            return
        self.check(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.check(self.folder)  # made meanwhile by another process as a link
        for name, text in self.texts.items():
            write_text(self.folder / name, text)


# Appended by `main` when curi writes the run's record itself (`RunRecord`).
_NO_SUBDIR = "hydra.output_subdir=null"


@contextlib.contextmanager
def _recorded(record: RunRecord | None) -> Iterator[None]:
    """Keep the run's record (`RunRecord`) around the command: a refusal (a `CuriError`)
    leaves the folder's record as it was; any other end, a stop by a signal included, writes
    it."""
    if record is None:
        yield
        return
    record.write(first=True)
    try:
        yield
    except CuriError:
        raise
    except BaseException:
        record.write()
        raise
    record.write()


def _task(name: str, fn, opts: Options, output_dir_given: bool, record: str | None):
    """The Hydra task: check the composed config (again: Hydra composed it anew), then run;
    `record`: the folder of the run's record that curi writes (`RunRecord`), or None."""

    def task(cfg) -> None:
        try:
            run = None if record is None else RunRecord(cfg, record)
            _prepare(cfg, fn, opts, output_dir_given)
            with _recorded(run):
                fn(cfg)
        except CuriError as e:
            _fail(name, e)
        except (OSError, RuntimeError) as e:
            line = _storage_error(e, cfg)
            if line is None:
                raise
            _fail(name, line)

    return task


def _check_flags(rest: list[str]) -> None:
    """Refuse a flag Hydra's parser does not know (``curi gap --nosuch``), which it answers
    with an 8-line usage. Its flags are read from that parser, not copied; an abbreviation is
    refused too (``--multi`` would be Hydra's ``--multirun``).

    Raises:
        ConfigError: naming the flag and the closest one.
    """
    from hydra._internal.utils import get_args_parser

    known = {s for action in get_args_parser()._actions for s in action.option_strings}
    for text in rest:
        flag = text.split("=", 1)[0] if text.startswith("--") else text
        if text.startswith("-") and flag not in known:
            raise ConfigError(
                f"unknown flag {flag!r}{did_you_mean(flag, known)}; give options as key=value "
                "(the flags Hydra takes: --help, -m, --cfg job, ...)"
            )


def _command(argv: list[str], commands: dict) -> tuple[str, list[str]]:
    """The command named by `argv` (``episodes render`` is ``episodes.render``) and its
    arguments; an unknown one ends the program in one line with the closest name."""
    name, rest = argv[0], argv[1:]
    subcommands = [c.split(".", 1)[1] for c in commands if c.startswith(f"{name}.")]
    if rest and rest[0] in subcommands:  # nested: `curi episodes render ...`
        return f"{name}.{rest[0]}", rest[1:]
    if name in commands and not (subcommands and rest and _is_word(rest[0])):
        return name, rest
    if name in commands:  # `curi lm exprot`
        name, known = f"{name} {rest[0]}", [f"{name} {c}" for c in subcommands]
    else:
        known = sorted({c.split(".", 1)[0] for c in commands})
    print(
        f"curi: error: unknown command {name!r}{did_you_mean(name, known)}; commands: "
        f"{', '.join(known)} (`curi --help` describes them)",
        file=sys.stderr,
    )
    sys.exit(2)


def _is_word(text: str) -> bool:
    """Whether `text` is a bare word (a subcommand's place), not an override or a flag."""
    return not text.startswith(("-", "+", "~")) and "=" not in text


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `curi` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = _commands()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage(commands))
        return
    if argv[0] in ("-V", "--version"):
        print(_version())
        return
    name, rest = _command(argv, commands)
    config_name = name.replace(".", "_")  # `episodes.render` -> episodes_render.yaml
    try:
        conf_dir()  # a broken install fails here with one message, not inside Hydra
        opts = load_options(config_name)
        if "--help" in rest or "-h" in rest:
            choices = {k: v for k, _, v in (t.partition("=") for t in rest) if k in opts.groups}
            print(help_text(opts, name.replace(".", " "), choices))
            return
        _check_flags(rest)
        check_override_keys(rest, opts)
        check_group_values(rest, opts)
        _check_jobs(name, rest)
        given = _value_of(rest, "output_dir") not in (None, "null")
        rest = _group_values(rest, opts)
        fn = commands[name].load()  # the command's module imports no torch: its check runs first
        # the job name names the run's log file (<command>.log beside .hydra/)
        rest = [*rest, *_run_dir(rest, opts), f"hydra.job.name={config_name}"]
        from curi.compose_cli import composable

        record = None
        if composable(rest):  # else (--cfg, --info ...) Hydra keeps the record as it does
            record = _precheck(config_name, rest, fn, opts, given)
        if record is not None:  # curi writes it, once the command has not refused the folder
            rest.append(_NO_SUBDIR)
    except CuriError as e:
        _fail(name, e)
    import hydra

    app = hydra.main(
        config_path=f"pkg://{CONF_PACKAGE}", config_name=config_name, version_base="1.3"
    )(_task(name, fn, opts, given, record))
    sys.argv = [f"curi {name.replace('.', ' ')}", *rest]
    app()


if __name__ == "__main__":  # python -m curi.cli
    main()
