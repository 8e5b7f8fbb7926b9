"""Name regexes from files people write (robot spec files, robot variants), matched in full against the names of a
robot's bodies, joints, actuators and geoms. Python's `re` can take exponential time on a pattern such as
`(a|aa)+b` against a name of 40 characters, so a careless or hostile file would hang the command; the `regex`
package matches with a time limit (and avoids most such backtracking on its own)."""

from __future__ import annotations

import functools

import regex

MATCH_SECONDS = 1.0  # a name pattern that takes longer than this on one name is refused


class NamePatternError(ValueError):
    """A name pattern that does not compile or that takes too long to match, with a one-line reason."""


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> regex.Pattern:
    """`pattern` compiled (with `re`'s syntax), or a `NamePatternError` saying why it is no regex."""
    try:
        return regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError) as err:
        raise NamePatternError(f"'{pattern}' is not a valid regex ({str(err).splitlines()[0][:100]})") from err


def name_matches(pattern: str, name: str) -> bool:
    """Whether `pattern` matches all of `name`; a `NamePatternError` where it takes longer than `MATCH_SECONDS`."""
    try:
        return compiled(pattern).fullmatch(name, timeout=MATCH_SECONDS) is not None
    except TimeoutError as err:
        raise NamePatternError(f"'{pattern}' takes more than {MATCH_SECONDS:g} s to match the name '{name}' (nested "
                               "repetition such as (a|aa)+ backtracks without end); write it without nesting") from err
