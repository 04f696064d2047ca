"""The numbers a user can publish, stored with the package and checked (docs/design.md, "Stored
expected numbers"): ``tiny.json`` and ``default.json`` (each bank's files, its ``concept_iid``
split, and digests of its episodes as every path makes them), ``gap_tiny.json`` (one gap row).
`check_installation` (the `curi check` command) compares an installation against them;
`curi.expected.generate` makes them, only for a deliberate change."""

from typing import TYPE_CHECKING

from curi.lazy import lazy_names

_EXPORTS = {
    "curi.expected.check": [
        "BANKS",
        "CheckResult",
        "check_installation",
        "expected_record",
        "summary",
    ],
    "curi.expected.compare": ["compare_bank", "compare_gap_row", "compare_record"],
    "curi.expected.measure": ["bank_record", "measure_bank"],
}
__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names, for type checkers and editors
    from curi.expected.check import (
        BANKS,
        CheckResult,
        check_installation,
        expected_record,
        summary,
    )
    from curi.expected.compare import compare_bank, compare_gap_row, compare_record
    from curi.expected.measure import bank_record, measure_bank

__all__ = [
    "BANKS",
    "CheckResult",
    "bank_record",
    "check_installation",
    "compare_bank",
    "compare_gap_row",
    "compare_record",
    "expected_record",
    "measure_bank",
    "summary",
]
