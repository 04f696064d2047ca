"""Rule-query tasks (docs/rules.md, after "Conceptual SCAN: Learning With and About Rules"):
episodes whose requests include questions about rules, answered by the Bayesian oracle with a
reply and an M/D qualifier, and the class mix of a task set."""

from curi.tasks.mix import ClassMix, class_mix, format_mix
from curi.tasks.replies import CLASSES, KINDS, QUALIFIERS, REPLIES, RULE_KINDS, reply_of
from curi.tasks.sampler import HYPOTHESES, Request, RuleTask, RuleTaskSampler

__all__ = [
    "CLASSES",
    "ClassMix",
    "HYPOTHESES",
    "KINDS",
    "QUALIFIERS",
    "REPLIES",
    "RULE_KINDS",
    "Request",
    "RuleTask",
    "RuleTaskSampler",
    "class_mix",
    "format_mix",
    "reply_of",
]
