"""`curi rules`' rules file: postfix programs, a clear line for the readable form and for a
file that is not a regular file."""

import os

import pytest

from curi.errors import ConceptError, ConfigError
from curi.renderers.rules_cli import read_rules


def test_rules_file_takes_postfix_and_names_the_form_of_a_readable_line(tmp_path):
    path = tmp_path / "rules.txt"
    path.write_text("# mine\nx color? blue = lambda S. exists=\n\n")
    assert read_rules(path) == ["x color? blue = lambda S. exists="]
    # the form curi split prints: it failed with a parser message that did not say why
    path.write_text("x color? blue = lambda S. exists=\nexists x in S: color(x) = blue\n")
    with pytest.raises(ConceptError, match="line 2: .* written in the postfix form, e.g. 'x co"):
        read_rules(path)


def test_rules_file_must_be_a_regular_file(tmp_path):
    fifo = tmp_path / "rules.fifo"
    os.mkfifo(fifo)  # reading it blocked until a writer came: forever
    with pytest.raises(ConfigError, match="rules file .* is a FIFO, not a regular file"):
        read_rules(fifo)
    with pytest.raises(ConfigError, match="rules file .* does not exist"):
        read_rules(tmp_path / "missing.txt")


@pytest.mark.parametrize("value", [["x color? blue = lambda S. exists="], 5])
def test_rules_that_are_not_a_file_name_are_one_line(value):
    """`curi rules rules=[...]` (the programs themselves, a list) ended in a TypeError
    traceback from opening a ListConfig as a path (issue 44's sweep of bad inputs)."""
    with pytest.raises(ConfigError, match=r"^rules= takes the name of a file of rule programs"):
        read_rules(value)
