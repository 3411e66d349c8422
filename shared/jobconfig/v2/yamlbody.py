"""A protocol v2 body (YAML, and so JSON) read as untrusted input: a document, or the problem with it.

OpenPAI read the body with js-yaml 3.13's ``safeLoad``; paiq reads it with PyYAML under a loader of its
own (:class:`_Loader`) that reads what js-yaml read, where it matters:

- scalars as js-yaml's default safe schema resolved them (YAML 1.2-ish): ``yes``/``no``/``on``/``off``
  are strings, ``true``/``false`` (any case js-yaml knew) booleans, ``010`` octal, ``0x10``, ``0b10``,
  ``1_000`` and ``1:30`` (base 60) integers, ``2021-01-01`` a timestamp (which ``version`` refuses);
- a mapping key is ``String(key)`` (``1: x`` is the key ``"1"``), and a key written twice is refused
  (js-yaml threw "duplicated mapping key"); keys merged with ``<<`` may be overridden, as js-yaml allowed;
- a stream of more than one document is refused, as is any tag but YAML's own scalar and collection
  tags (``!!python/object:...``, ``!local``; and ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs``, which
  js-yaml read but whose values JSON cannot hold: a deliberate difference).

Bounded before anything grows, with the limits of JSON bodies (:class:`~shared.jobconfig.limits.JobLimits`):
the body's size first, then its text must be UTF-8 (OpenPAI's body parser turned bad bytes into U+FFFD;
paiq refuses them), then while the document is composed, node by node, its depth and its number of values
**with every alias expanded** (each node's expanded size is known when it is finished, so an alias of a
huge anchor is counted, not copied: a "billion laughs" body is refused after reading it once). Keys and
strings are held to their limits by the walk of the decoded document
(:func:`shared.jobconfig.limits.walk`), as a JSON body's are. libyaml's parser (PyYAML's C extension)
makes the events where it is installed; composing is Python's, for the counting.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from shared.jobconfig.limits import JobLimits, setting
from shared.jobconfig.problems import ConfigProblem, json_type
from shared.jobconfig.v2.jsvalues import js_string


class _PythonParser(Reader, Scanner, Parser):
    """PyYAML's own parser, where it was built without libyaml."""

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)


# libyaml's event parser where PyYAML was built with it (the same events, ten times faster).
_PARSER: Any = getattr(importlib.import_module("yaml.cyaml"), "CParser", None) if yaml.__with_libyaml__ \
    else _PythonParser

MAX_BODY_BYTES = 1024 * 1024  # as a JSON body (shared.admission.validation.MAX_CONFIG_BYTES)
_TAG = "tag:yaml.org,2002:"
# YAML's own tags that paiq reads; any other tag is refused.
ALLOWED_TAGS = frozenset(f"{_TAG}{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp",
                                                  "merge"))
_FLOAT = re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_TIMESTAMP = re.compile(r"^[0-9]{4}-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?"
                        r"(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9]{2})?))?$")
_BASE60_TAIL = re.compile(r"^(?::[0-5]?[0-9])+$")


class YamlRefusedError(Exception):
    """What the loader refuses while reading: the problem, worded for the user."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


def _is_int(text: str) -> bool:
    """js-yaml 3.13's ``resolveYamlInteger``."""
    body = text[1:] if text[:1] in "+-" else text
    if not body:
        return False
    if body[0] == "0":
        if len(body) == 1:
            return True
        base, digits = {"b": ("01", body[2:]), "x": ("0123456789abcdefABCDEF", body[2:])}.get(
            body[1], ("01234567", body[1:]))
        return (bool(digits.replace("_", "")) and all(c in base or c == "_" for c in digits)
                and not digits.endswith("_"))
    if body[0] == "_":
        return False
    head, colon, tail = body.partition(":")
    if not head.replace("_", "") or not all(c.isascii() and (c.isdigit() or c == "_") for c in head):
        return False
    if head.endswith("_") and not colon:
        return False
    return not colon or bool(_BASE60_TAIL.match(":" + tail))


def implicit_tag(text: str) -> str:
    """The tag js-yaml's default safe schema gave a plain scalar."""
    if text in ("", "~", "null", "Null", "NULL"):
        return f"{_TAG}null"
    if text in ("true", "True", "TRUE", "false", "False", "FALSE"):
        return f"{_TAG}bool"
    if _is_int(text):
        return f"{_TAG}int"
    if _FLOAT.match(text) and not text.endswith("_"):
        return f"{_TAG}float"
    if _DATE.match(text) or _TIMESTAMP.match(text):
        return f"{_TAG}timestamp"
    if text == "<<":
        return f"{_TAG}merge"
    return f"{_TAG}str"


def _base60(parts: list[str], convert: type[int] | type[float]) -> int | float:
    total: int | float = 0
    for part in parts:
        total = total * 60 + convert(part)
    return total


class _Composer(Composer):
    """PyYAML's composer, counting as it goes: each node's size with aliases expanded (JSON values, keys
    not counted, as the limits count a JSON body's) and its depth; over a limit, it stops reading."""

    limits: JobLimits
    check_event: Callable[..., bool]  # the parser's
    peek_event: Callable[[], Any]

    def __init__(self) -> None:
        super().__init__()
        self.sizes: dict[int, int] = {}
        self.depth = 0
        self.aliases = False

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor
            node = super().compose_node(parent, index)
            if node is None:  # pragma: no cover - an alias always names a node
                return None
            self.aliases = True
            self._count(node, self.sizes.get(id(node), 1), f"the alias *{anchor} is")
            return node
        collection = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        if collection:
            self.depth += 1
            if self.depth > self.limits.max_json_depth:
                raise YamlRefusedError(f"nests mappings and lists more than {self.limits.max_json_depth} levels deep; "
                                  f"paiq accepts at most {self.limits.max_json_depth} levels "
                                  f"({setting('max_json_depth')})")
        node = super().compose_node(parent, index)
        if collection:
            self.depth -= 1
        if node is None:  # pragma: no cover - only at the stream's end
            return None
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self.sizes.get(id(item), 1) for item in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self.sizes.get(id(v), 1) + self.sizes.get(id(k), 1) - 1 for k, v in node.value)
        self._count(node, size, "its aliases are" if self.aliases else "it is")
        return node

    def _count(self, node: Node, size: int, what: str) -> None:
        self.sizes[id(node)] = size
        if size > self.limits.max_json_values:
            raise YamlRefusedError(f"holds more than {self.limits.max_json_values:,} values once {what} expanded; "
                              f"paiq accepts at most {self.limits.max_json_values:,} in a job "
                              f"({setting('max_json_values')})")


class _Constructor(SafeConstructor):
    """Values as js-yaml made them: its integers and floats, string keys, duplicate keys refused."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        if node.tag not in ALLOWED_TAGS:
            raise YamlRefusedError(f"uses the tag {node.tag} at line {node.start_mark.line + 1}, column "
                              f"{node.start_mark.column + 1}; paiq reads only YAML's own tags for strings, "
                              "numbers, booleans, null, timestamps, mappings and lists")
        return super().construct_object(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        if not _is_int(text):
            raise ConstructorError(None, None, f"cannot read {text!r} as an integer", node.start_mark)
        sign = -1 if text.startswith("-") else 1
        body = text.lstrip("+-")
        if ":" in body:
            return sign * int(_base60(body.split(":"), int))
        if body[:2] in ("0b", "0x"):
            return sign * int(body[2:], 2 if body[1] == "b" else 16)
        if body.startswith("0") and body != "0":
            return sign * int(body[1:], 8)
        return sign * int(body)

    def construct_yaml_float(self, node: ScalarNode) -> float:
        text = str(self.construct_scalar(node)).replace("_", "").lower()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        try:
            if body == ".inf":
                return sign * float("inf")
            if body == ".nan":
                return float("nan")
            if ":" in body:
                return sign * float(_base60(body.split(":"), float))
            return sign * float(body)
        except ValueError as e:
            raise ConstructorError(None, None, f"cannot read {text!r} as a number", node.start_mark) from e

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[str, Any]:  # type: ignore[override]
        """js-yaml's ``storeMappingPair``: keys as ``String(key)``; a key written twice refused, except one
        that a ``<<`` merge brought (an explicit key overrides it; a merge never overrides a key)."""
        out: dict[str, Any] = {}
        overridable: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == f"{_TAG}merge":
                for source in self._merge_sources(value_node):
                    for key, value in source.items():
                        if key not in out:
                            out[key] = value
                            overridable.add(key)
                continue
            key = js_string(self.construct_object(key_node, deep=True))
            if key in out and key not in overridable:
                mark = key_node.start_mark
                raise YamlRefusedError(f"writes the key {key[:64]!r} twice in one mapping (line {mark.line + 1}, "
                                  f"column {mark.column + 1}); js-yaml refused duplicated mapping keys")
            overridable.discard(key)
            out[key] = self.construct_object(value_node, deep=deep)
        return out

    def _merge_sources(self, node: Node) -> list[dict[str, Any]]:
        nodes = node.value if isinstance(node, SequenceNode) else [node]
        sources = []
        for item in nodes:
            value = self.construct_object(item, deep=True)
            if not isinstance(value, dict):
                raise YamlRefusedError(f"merges ({'<<'}) {json_type(value)} at line {item.start_mark.line + 1}; "
                                  "only mappings can be merged")
            sources.append(value)
        return sources

    def construct_yaml_map(self, node: MappingNode) -> Any:
        yield self.construct_mapping(node, deep=True)


_Constructor.add_constructor(f"{_TAG}int", _Constructor.construct_yaml_int)  # type: ignore[type-var]
_Constructor.add_constructor(f"{_TAG}float", _Constructor.construct_yaml_float)  # type: ignore[type-var]
_Constructor.add_constructor(f"{_TAG}map", _Constructor.construct_yaml_map)  # type: ignore[type-var]


class _Resolver(BaseResolver):
    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool] | None) -> str:
        if kind is ScalarNode and implicit and implicit[0]:
            return implicit_tag(str(value))
        return str(super().resolve(kind, value, implicit))  # type: ignore[no-untyped-call]


class _Loader(_PARSER, _Composer, _Constructor, _Resolver):  # type: ignore[misc]
    """js-yaml's safe schema over PyYAML's parser (libyaml's where installed), with the counting composer."""

    def __init__(self, text: str, limits: JobLimits) -> None:
        _PARSER.__init__(self, text)
        self.limits = limits
        _Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)

    # The composer's, not libyaml's: ours counts.
    get_single_node = Composer.get_single_node
    check_node = Composer.check_node
    get_node = Composer.get_node


def _refused(rule: str) -> ConfigProblem:
    return ConfigProblem(path="(body)", rule=rule)


def load_yaml_body(body: bytes | str, limits: JobLimits) -> Any | ConfigProblem:
    """The one document ``body`` holds (None for an empty one), or the problem that refuses it."""
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    if len(data) > MAX_BODY_BYTES:
        return _refused(f"must be at most {MAX_BODY_BYTES:,} bytes, got {len(data):,}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return _refused(f"must be UTF-8 text; byte {e.start:,} (0x{data[e.start]:02x}) is not")
    text = text.removeprefix("\ufeff")
    loader = _Loader(text, limits)
    try:
        return loader.get_single_data()
    except YamlRefusedError as e:
        return _refused(e.rule)
    except yaml.MarkedYAMLError as e:
        return _refused(f"is not YAML paiq reads: {_marked(e)}")
    except yaml.YAMLError as e:
        return _refused(f"is not YAML paiq reads: {e}")
    except RecursionError:  # pragma: no cover - the depth limit comes first
        return _refused("nests too deeply")
    finally:
        loader.dispose()


def _marked(error: yaml.MarkedYAMLError) -> str:
    """A YAML error as one line: what is wrong, and where (the line and column of the body)."""
    what = error.problem or error.context or "a syntax error"
    if "expected a single document" in str(error.context or ""):
        return "a body holds one document; this one holds more (---)"
    mark = error.problem_mark or error.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{what}{where}"
