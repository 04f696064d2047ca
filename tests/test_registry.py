"""One registry error for every registry: an unknown name, an unknown option, a missing one or
a value of the wrong type or range of any registered part (renderer, encoder, pooler, split
rule, kind of rendered file) is a `ConfigError` naming the valid names or options
(`curi.registry.Registry`)."""

import re

import pytest

from curi.errors import ConfigError, CuriError, OptionError, SplitError
from curi.export import EpisodeFileError, get_media, list_media
from curi.models.encoders import ENCODERS
from curi.models.poolers import POOLERS
from curi.registry import Registry
from curi.renderers import RENDERERS
from curi.splits import SplitSpec, make_split
from curi.splits.rules import SPLIT_RULES

REGISTRIES = [RENDERERS, ENCODERS, POOLERS, SPLIT_RULES]
PARTS = [(r, name) for r in REGISTRIES for name in r.names()]
POOLER_SIZE = {"in_dim": 4, "num_objects": 3}  # the options the pooler contract requires


def _listed(names) -> str:
    """A pattern that matches a message listing every one of `names`."""
    return "".join(f"(?=.*'{re.escape(n)}')" for n in names)


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.kind)
def test_an_unknown_name_is_a_config_error_naming_the_valid_ones(registry):
    assert len(registry) > 0
    with pytest.raises(ConfigError, match=f"unknown {registry.kind} 'nosuch'" + _listed(registry)):
        registry.get("nosuch")


@pytest.mark.parametrize(("registry", "name"), PARTS, ids=lambda x: getattr(x, "kind", x))
def test_an_unknown_option_is_a_config_error_naming_the_valid_ones(registry, name):
    if registry is SPLIT_RULES:
        valid = SPLIT_RULES.get(name).option_names()
        with pytest.raises(ConfigError, match=r"unknown split option\(s\) \['nosuch'\]"):
            SplitSpec.from_mapping({"name": "s", "rule": name, "nosuch": 1})
    else:
        valid = registry.options(name)
        with pytest.raises(ConfigError, match=r"\['nosuch'\]; valid: \[" + _listed(valid)):
            registry.build(name, nosuch=1)
    assert name in registry


@pytest.mark.parametrize("name", RENDERERS.names() + ENCODERS.names() + POOLERS.names())
def test_a_value_of_the_wrong_type_is_a_config_error(name):
    """Every part takes an integer option (a size); a string there is named, not a traceback."""
    for registry in (RENDERERS, ENCODERS, POOLERS):
        if name not in registry.names():
            continue
        extra = POOLER_SIZE if registry is POOLERS else {}
        key = next(k for k in ("width", "out_dim", "sample_rate") if k in registry.options(name))
        with pytest.raises(OptionError, match=f"bad option for {registry.kind} '{name}': {key}="):
            registry.build(name, **{**extra, key: "many"})


def test_a_missing_or_out_of_range_option_is_a_config_error():
    with pytest.raises(ConfigError, match=r"missing option\(s\) \['num_objects'\]; valid"):
        POOLERS.build("avg", in_dim=4)
    with pytest.raises(ConfigError, match="bad option for renderer 'sound': sample_rate must"):
        RENDERERS.build("sound", sample_rate=100)
    with pytest.raises(ConfigError, match="bad option for renderer 'image': image size"):
        RENDERERS.build("image", width=4)
    with pytest.raises(ConfigError, match="bad option for encoder 'image': grid=.* tuple"):
        ENCODERS.build("image", grid=(1, 2, 3))
    with pytest.raises(ConfigError, match=r"split 's': rule random_groups: fractions\[0\] must"):
        SplitSpec(name="s", rule="random_groups", fractions="abc")


def test_split_errors_are_config_errors_and_split_errors():
    """A split rule's or preset's bad name stays a SplitError where a split is made."""
    for bad in ({"name": "s", "rule": "nosuch"}, "nosuch_preset"):
        with pytest.raises(SplitError) as e:
            make_split(None, bad)
        assert isinstance(e.value, ConfigError)
    with pytest.raises(ConfigError, match="unknown rule 'nosuch'" + _listed(SPLIT_RULES)):
        SplitSpec(name="s", rule="nosuch")


def test_unknown_media_is_a_config_error_naming_the_valid_ones():
    assert list_media()
    with pytest.raises(ConfigError, match="media='nosuch'.*valid: " + ", ".join(list_media())):
        get_media("nosuch")


def test_options_of_the_right_type_pass():
    """Lists stand for tuples (YAML has no tuples), ints for floats, None where allowed."""
    ENCODERS.check_options("image", {"grid": [5, 4], "height": 80})
    RENDERERS.check_options("sound", {"duration": 2, "device": "cpu"})
    RENDERERS.check_options("image", {"chunk": None})
    POOLERS.check_options("avg", {**POOLER_SIZE, "hidden": [8, 8]})


def test_a_registry_raises_only_option_errors():
    with pytest.raises(TypeError, match="OptionError"):
        Registry("thing", error=ValueError)
    assert issubclass(OptionError, ConfigError) and issubclass(OptionError, ValueError)


def test_every_error_class_is_a_curi_error():
    assert issubclass(EpisodeFileError, CuriError) and issubclass(EpisodeFileError, ValueError)
