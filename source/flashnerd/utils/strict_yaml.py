"""YAML for the files people write by hand (robot spec files, robot variants): PyYAML's safe loader (no tags that
build objects, so reading a file never runs code), with YAML 1.2's core rules for plain scalars (no dates, no `=`),
and no repeated keys (merge keys `<<` work as in YAML; PyYAML from 6.0.4 merges each mapping's pairs once, where
mappings that merged each other repeatedly grew exponentially).

PyYAML follows YAML 1.1, where `mass: 010` is 8 (octal), `1:30` is 90 (base 60), `on` is True and `5e-3` is a
string, and a repeated key silently replaces the first. Here numbers read as written (`010` is 10, `5e-3` is 0.005,
`0x10` is 16), only true/false are booleans, and a key given twice in one mapping is an error naming its line.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

import yaml

_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")
_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
_NULL = re.compile(r"~|null|Null|NULL|")


class StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` with YAML 1.2 core scalars and no repeated mapping keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if not isinstance(node, yaml.MappingNode):  # e.g. `!!map [a]`: the base class says what it expected
            return super().construct_mapping(node, deep=deep)
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`; an explicit key may override a merged one
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"found the key {brief(key)} a second time",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = self.construct_scalar(node)
        try:
            if len(text) > 4302:  # Python converts decimal text of at most 4300 digits; other bases alike
                raise ValueError
            if text.startswith(("0o", "0x")):
                return int(text[2:], 8 if text[1] == "o" else 16)
            return int(text, 10)
        except ValueError:  # an explicit !!int tag on other text, or more digits than Python converts
            raise yaml.constructor.ConstructorError(None, None, f"{brief(text)} is not a whole number of at most "
                                                    "4300 digits", node.start_mark) from None

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> bool:
        text = self.construct_scalar(node)
        if not _BOOL.fullmatch(text):  # an explicit !!bool tag on other text
            raise yaml.constructor.ConstructorError(None, None, f"{brief(text)} is not true or false",
                                                    node.start_mark)
        return text.lower() == "true"

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        text = self.construct_scalar(node)
        try:
            return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
        except ValueError:  # an explicit !!float tag on other text
            raise yaml.constructor.ConstructorError(None, None, f"{brief(text)} is not a number",
                                                    node.start_mark) from None


# YAML 1.2 core resolvers in place of PyYAML's 1.1 ones (booleans, ints, floats, nulls)
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                           "tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _tag, _pattern, _first in (("bool", _BOOL, "tTfF"), ("int", _INT, "-+0123456789"),
                               ("float", _FLOAT, "-+.0123456789"), ("null", _NULL, ["~", "n", "N", ""])):
    StrictLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(rf"^(?:{_pattern.pattern})$"),
                                       list(_first))
StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)
StrictLoader.add_constructor("tag:yaml.org,2002:bool", StrictLoader.construct_yaml_bool)


class StrictDumper(yaml.SafeDumper):
    """`yaml.SafeDumper` that quotes every string `StrictLoader` would read as something else (`1e3`, `0o17`), so
    what it writes reads back the same."""


StrictDumper.yaml_implicit_resolvers = StrictLoader.yaml_implicit_resolvers


def load_yaml(text: str) -> Any:
    """The YAML document in `text`, read by `StrictLoader` (yaml.YAMLError on bad syntax, a tag, a repeated key)."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except (KeyError, AttributeError, TypeError, ValueError, IndexError, OverflowError) as err:
        # PyYAML's constructors of the standard tags (!!timestamp, !!set, ...) fail this way on text they do not
        # expect; a file's content is never a reason for a traceback
        raise yaml.constructor.ConstructorError(
            None, None, f"a value this reader cannot take ({type(err).__name__}: {brief(str(err))})") from None


def dump_yaml_text(data: Any) -> str:
    """`data` as YAML text that `load_yaml` reads back to `data` (keys in their order)."""
    return yaml.dump(data, Dumper=StrictDumper, sort_keys=False)


def yaml_problem(err: BaseException) -> str:
    """One line on why a file did not load: the YAML problem and its line and column, where PyYAML knows them."""
    if isinstance(err, RecursionError):
        return "nested too deeply"
    if isinstance(err, UnicodeDecodeError):
        return "not UTF-8 text"
    problem = getattr(err, "problem", None) or getattr(err, "reason", None) or type(err).__name__
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    if isinstance(err, yaml.reader.ReaderError):  # a character YAML does not allow, e.g. a control character
        where = f" at character {err.position}"
    if isinstance(err, yaml.constructor.ConstructorError) and "tag" in problem:
        problem += " (tags are not allowed: a file is data, never code)"
    return " ".join(f"{problem}{where}".split())


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 60, 60


def brief(value: Any) -> str:
    """`repr(value)` cut short: a value from a file may be huge, or a YAML alias structure that repeats itself
    exponentially, and an error message must stay one short line."""
    try:
        return _SHORT.repr(value)
    except ValueError:  # an int too long for Python to write in decimal
        return "<a number of more than 4300 digits>"
