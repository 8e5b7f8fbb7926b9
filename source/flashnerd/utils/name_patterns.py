"""Name regexes from files people write (robot spec files, robot variants), matched in full against the names of a
robot's bodies, joints, actuators and geoms. Python's `re` can take exponential time on a pattern such as
`(a|aa)+b` against a name of 40 characters, so a careless or hostile file would hang the command; the `regex`
package matches with a time limit (and avoids most such backtracking on its own). A limit per match alone would let
a file of many slow patterns, each just under it, run for hours over a robot's names, so all matches of a process
share a total budget too; a name matched once is remembered (scenes are built again for every backend and world
group, with the same patterns and names)."""

from __future__ import annotations

import functools
import time

import regex

MATCH_SECONDS = 1.0  # a name pattern that takes longer than this on one name is refused
TOTAL_MATCH_SECONDS = 20.0  # all name matching of one process; ordinary files spend milliseconds
_spent = 0.0  # seconds of matching so far in this process


class NamePatternError(ValueError):
    """A name pattern that does not compile or that takes too long to match, with a one-line reason."""


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> regex.Pattern:
    """`pattern` compiled (with `re`'s syntax), or a `NamePatternError` saying why it is no regex."""
    try:
        return regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError) as err:
        raise NamePatternError(f"'{pattern}' is not a valid regex ({str(err).splitlines()[0][:100]})") from err


@functools.lru_cache(maxsize=8192)
def name_matches(pattern: str, name: str) -> bool:
    """Whether `pattern` matches all of `name`; a `NamePatternError` where it takes longer than `MATCH_SECONDS`, or
    where this process's matching has used up `TOTAL_MATCH_SECONDS`."""
    global _spent
    left = TOTAL_MATCH_SECONDS - _spent
    if left <= 0.0:
        raise NamePatternError(_over_total(f"the last '{pattern}'"))
    limit = min(MATCH_SECONDS, left)
    start = time.perf_counter()
    try:
        return compiled(pattern).fullmatch(name, timeout=limit) is not None
    except TimeoutError as err:
        # `regex` keeps its own clock, which can stop a hair short of `limit` by ours: a match that ran out of time
        # spent all of its limit, so that a timeout at the total leaves nothing for the next pattern
        start = min(start, time.perf_counter() - limit)
        if limit < MATCH_SECONDS:
            raise NamePatternError(_over_total(f"the last '{pattern}' on the name '{name}'")) from err
        raise NamePatternError(f"'{pattern}' takes more than {MATCH_SECONDS:g} s to match the name '{name}' (nested "
                               "repetition such as (a|aa)+ backtracks without end); write it without nesting") from err
    finally:
        _spent += time.perf_counter() - start


def _over_total(last: str) -> str:
    return (f"name patterns have taken more than {TOTAL_MATCH_SECONDS:g} s of matching in all, {last} (a file with "
            "many slow patterns); write them without nested repetition")
