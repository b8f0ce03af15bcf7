"""The jobs lists' label filter (`?label=KEY:VALUE`, docs/REFERENCE.md section 5), shared by
the API and the UI so that both read it alike."""

from __future__ import annotations

from config.job_extras import LABEL_KEY

Wanted = list[tuple[str, str | None]]  # (key, value or None for "any value")


def parse_filter(values: list[str]) -> Wanted:
    """`label=KEY:VALUE` (that value) or `label=KEY` (any value), each one required;
    `KEY=VALUE` too, as kubectl spells a selector (no key holds ':' or '=').

    :raises ValueError: a key that no label can have, with a message for the caller.
    """
    wanted: Wanted = []
    for value in values:
        key, separator, label = value.partition(_separator(value))
        if not LABEL_KEY.fullmatch(key):
            raise ValueError(f"label {value!r}: write KEY:VALUE, KEY=VALUE or KEY, the key matching "
                             "^[a-z][a-z0-9_-]{0,62}$")
        wanted.append((key, label if separator else None))
    return wanted


def _separator(value: str) -> str:
    """Whichever of ':' and '=' comes first: the value after it may hold the other."""
    colon, equals = value.find(":"), value.find("=")
    return "=" if equals >= 0 and (colon < 0 or equals < colon) else ":"


def matches(labels: dict[str, str] | None, wanted: Wanted) -> bool:
    labels = labels or {}
    return all(key in labels and (value is None or labels[key] == value) for key, value in wanted)
