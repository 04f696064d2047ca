"""The learners curi trains, found by name (`learner=`): the paper's prototypical networks
(``protonet``, configured by the ``modality``, ``pooling`` and ``train`` groups) and the
propose-and-verify learner (``propose_verify``, docs/learners.md). Each entry checks and returns
its own options, so a bad option of either ends in one `OptionError` naming the valid ones."""

from __future__ import annotations

from curi.registry import Registry

__all__ = ["FALLBACK_POOLING", "LEARNERS", "learner_options", "list_learners", "register_learner"]

LEARNERS: Registry = Registry("learner")
register_learner = LEARNERS.register
#: The pooler of propose_verify's fallback protonet (`curi.models.protonet_fallback`): the
#: cheapest of the paper's four (a mean over objects, then an MLP).
FALLBACK_POOLING = "avg"


def list_learners() -> list[str]:
    """Names of the registered learners, sorted."""
    return LEARNERS.names()


def learner_options(name: str, options: dict | None = None) -> dict:
    """The checked options of learner `name` (``learner.<key>`` on the command line).

    Raises:
        OptionError: an unknown learner or an option it does not take (``learner.k`` given to
            a protonet, for instance).
        ConfigError: an option out of range (``learner.k=0``).
    """
    return LEARNERS.build(name, **(options or {}))


@register_learner("protonet")
def protonet() -> dict:
    """Today's prototypical networks: no options of their own here (see ``pooling=`` and
    ``train.*``)."""
    return {"name": "protonet"}


@register_learner("propose_verify")
def propose_verify(
    *,
    k: int = 64,
    max_errors: int = 2,
    samples: int = 32,
    rounds: int = 8,
    steps: int = 200,
    batch: int = 16,
    lr: float = 3e-3,
    dim: int = 64,
    layers: int = 2,
    holes: bool = True,
    select_episodes: int = 50,
    fallback_steps: int = 500,
) -> dict:
    """The propose-and-verify learner's options: the search's (`Settings`: k, max_errors,
    samples, rounds; decoding, temperature, fill_decay and repair are chosen on held-out
    training concepts), its training's (steps, batch, lr, dim, layers, holes,
    select_episodes) and its fallback protonet's (fallback_steps; 0: no fallback)."""
    options = dict(locals())
    from curi import validate
    from curi.models.propose_verify import Settings

    Settings(k=k, max_errors=max_errors, samples=samples, rounds=rounds)  # range checks
    validate.integer(steps, "learner.steps", low=0)
    validate.integer(batch, "learner.batch", low=1)
    validate.number(lr, "learner.lr", low=0.0, open_low=True)
    validate.integer(dim, "learner.dim", low=4)
    validate.integer(layers, "learner.layers", low=1)
    validate.integer(select_episodes, "learner.select_episodes", low=1)
    validate.integer(fallback_steps, "learner.fallback_steps", low=0)
    return {"name": "propose_verify", **options}
