"""The choice a mistyped name most likely meant: for "did you mean ...?" in an error message."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's own default: a quarter of the letters may differ ('node' for 'nodes', 'Trian' for 'Train').
SIMILARITY_CUTOFF = 0.6


def closest(value: str, choices: Iterable[str]) -> str | None:
    """The choice `value` was most likely meant to be, or None when none is close.

    Case never counts against a choice: 'TRN1.32XLARGE' is 'trn1.32xlarge', 'train' is 'Train'.
    """
    by_lower = {choice.lower(): choice for choice in choices}
    matches = difflib.get_close_matches(value.lower(), by_lower, n=1, cutoff=SIMILARITY_CUTOFF)
    return by_lower[matches[0]] if matches else None
