"""Safe YAML with line numbers: plain Python values plus a map from path to line.

The document is composed into nodes by PyYAML's SafeLoader (no Python tags can ever be
constructed) and walked here, so that each value's line is known. A path is a tuple of
map keys and list indexes from the root, e.g. ("jobs", 0, "target", "http", "url").

The walk is stricter than yaml.safe_load in ways that matter for config files:
- only the standard scalar, list and map tags are accepted; `!!python/...` and other
  tags are an error at their line instead of being silently constructed or ignored;
- map keys are taken as written (`on:` is the key "on", not True) and must be scalars;
- a key given twice in one map is an error (safe_load keeps the last one silently);
- merge keys (`<<: *base`) work, and the map's own keys override the merged ones;
- aliases are expanded, but a document is refused when it nests deeper than MAX_DEPTH,
  or expands to more than EXPANSION_FACTOR times its own values (nodes as written,
  each counted once, however often an alias names it) once past the first
  EXPANSION_FLOOR values, or past MAX_VALUES in all. So 250 bytes of nested aliases
  (a "billion laughs") cost a few milliseconds, not 90 MB; merge keys reused by every
  job stay well inside the factor.

Where libyaml is installed, its C parser reads the text into events. A plain document
(no anchor, alias, tag or merge key: most config files) becomes values and lines
straight from the events, with no nodes (config/yamlevents.py). Any other document is
composed from the same events by PyYAML's own Python composer (FastLoader): the same
node tree, with the same lines, in a fraction of the pure loader's time
(docs/PERFORMANCE.md). libyaml's C composer is never used: it recurses in C and crashes
the process (segmentation fault) on a document nested some thousands of levels deep,
where the Python composer raises RecursionError. Any failure on the fast path (a syntax
error, a refusal, a recursion) parses the text again with the pure-Python SafeLoader,
and that run's answer is the one given: libyaml's error messages differ from PyYAML's,
and `validate` must print the same text on machines with and without libyaml. A text
that libyaml reads differently (_PURE_ONLY: a tab, a byte-order mark, a character the
pure reader refuses) goes to the pure loader directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import Reader
from yaml.resolver import Resolver

from config.model import ConfigError, ProjectConfigError
from config.yamlevents import Path, Unplain, read_events

__all__ = ["EXPANSION_FACTOR", "EXPANSION_FLOOR", "FAST_LOADER", "LineMap", "MAX_DEPTH", "MAX_VALUES",
           "Path", "load_yaml"]

MAX_VALUES = 500_000
MAX_DEPTH = 64
EXPANSION_FLOOR = 10_000  # values any document may expand to
EXPANSION_FACTOR = 20  # beyond that, at most this many values per node written

_STANDARD = "tag:yaml.org,2002:"
_STR = _STANDARD + "str"
_SCALAR_TAGS = {_STANDARD + name for name in ("str", "int", "float", "bool", "null", "timestamp")}


@dataclass
class LineMap:
    """Lines of the values of one document; paths without a line get the nearest ancestor's."""

    lines: dict[Path, int] = field(default_factory=dict)
    default: int = 0

    def line(self, path: Path) -> int:
        for end in range(len(path), -1, -1):
            found = self.lines.get(tuple(path[:end]))
            if found is not None:
                return found
        return self.default


class _ReadDifferently(yaml.YAMLError):  # type: ignore[misc]  # yaml has no stubs here
    """A text FastLoader would read otherwise than the pure loader: the pure one reads it."""


class _Refused(Exception):
    def __init__(self, node: Node | None, message: str) -> None:
        super().__init__(message)
        self.line = node.start_mark.line + 1 if node is not None else 1
        self.message = message


def _fast_loader() -> type[Any] | None:
    """libyaml's parser under PyYAML's Python composer and safe constructor; None without libyaml."""
    if not yaml.__with_libyaml__:
        return None
    from yaml._yaml import CParser  # there only with libyaml

    # Composer first: its get_single_node. The bases are untyped (yaml has no stubs here).
    class FastLoader(Composer, CParser, SafeConstructor, Resolver):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self.aliases = 0  # read by _Walker.check_expansion

        def compose_node(self, parent: Node | None, index: object) -> Node:
            event = self.peek_event()
            if isinstance(event, AliasEvent):
                self.aliases += 1
            elif isinstance(event, ScalarEvent) and not event.value and not event.style:
                # An empty plain value: libyaml marks it at the next token, PyYAML where it stands.
                raise _ReadDifferently()
            return Composer.compose_node(self, parent, index)

    return FastLoader


# Characters that send a text to the pure loader alone: those its reader refuses, a
# byte-order mark (U+FEFF: libyaml skips it wherever a document starts, PyYAML reads it
# as content) and a tab (libyaml takes tabs as separators in places PyYAML refuses them).
_PURE_ONLY = re.compile(Reader.NON_PRINTABLE.pattern + "|[\t\ufeff]")

# The loader tried first; None parses with the pure-Python SafeLoader only (tests set it so).
FAST_LOADER: type[Any] | None = _fast_loader()


def load_yaml(text: str, filename: str) -> tuple[Any, LineMap]:
    """Parse one YAML document; ProjectConfigError with the line of the first problem."""
    if FAST_LOADER is not None and not _PURE_ONLY.search(text):
        parser = FAST_LOADER(text)
        try:  # most config files: values and lines straight from the events
            value, lines = read_events(parser.get_event, MAX_DEPTH, MAX_VALUES)
            return value, LineMap(lines, default=1)
        except (yaml.YAMLError, Unplain):
            pass  # anchors, tags, merge keys or a fault: composed below, in the composer's words
        finally:
            parser.dispose()
        loader = FAST_LOADER(text)
        try:
            return _compose_and_walk(loader)
        except (yaml.YAMLError, _Refused, RecursionError):
            pass  # the pure loader below says what is wrong, in its own words
        finally:
            loader.dispose()
    try:
        # The reader checks every character at once: a NUL or another non-printable
        # character fails here, before any loader exists.
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as error:
        raise ProjectConfigError([_unprintable(error, text, filename)]) from None
    try:
        return _compose_and_walk(loader)
    except yaml.MarkedYAMLError as error:
        raise ProjectConfigError([_syntax_error(error, filename)]) from None
    except yaml.YAMLError as error:  # e.g. a reader error without a position
        raise ProjectConfigError([ConfigError(filename, 1, f"bad YAML: {error}")]) from None
    except _Refused as refused:
        raise ProjectConfigError([ConfigError(filename, refused.line, refused.message)]) from None
    except RecursionError:  # the composer itself recurses per nesting level
        message = f"bad YAML: nested more than {MAX_DEPTH} levels deep"
        raise ProjectConfigError([ConfigError(filename, 1, message)]) from None
    finally:
        loader.dispose()


def _compose_and_walk(loader: Any) -> tuple[Any, LineMap]:
    """:raises yaml.YAMLError, _Refused, RecursionError: what load_yaml turns into errors."""
    root = loader.get_single_node()
    if root is None:  # an empty file: no values at all
        return None, LineMap(default=1)
    walker = _Walker(loader, root)
    value = walker.value(root, (), 0)
    return value, LineMap(walker.lines, default=1)


def _unprintable(error: yaml.reader.ReaderError, text: str, filename: str) -> ConfigError:
    line = text[: error.position].count("\n") + 1
    return ConfigError(filename, line, f"bad YAML: character U+{error.character:04X} is not allowed "
                                       "(control characters other than tab and line breaks)")


def _syntax_error(error: yaml.MarkedYAMLError, filename: str) -> ConfigError:
    mark = error.problem_mark or error.context_mark
    line = mark.line + 1 if mark is not None else 1
    context, problem = error.context or "", error.problem or ""
    if context and problem:  # PyYAML's own order: "while scanning X", then what it found
        detail = f"{problem} ({context})" if context.startswith("while") \
            else f"{context}, {problem}"
    else:
        detail = context or problem or "syntax error"
    message = f"bad YAML: {detail}"
    # `*` starts an alias and `@` is reserved, so unquoted cron macros and `* * * * *`
    # schedules are the most common way to trip over YAML here.
    if "alias" in message or "'@'" in message or "'*'" in message:
        message += "; quote values that start with '*' or '@', e.g. schedule: \"@daily\""
    return ConfigError(filename, line, message)


class _Walker:
    def __init__(self, loader: Any, root: Node) -> None:
        self.loader, self.root = loader, root
        self.lines: dict[Path, int] = {}
        self.count = 0
        self.limit = min(EXPANSION_FLOOR, MAX_VALUES)  # raised once, to the document's own bound
        self.limit_known = False
        # id(node) -> index of its first own pair, remembered because flattening a
        # merge changes the node and an aliased map is walked once per alias.
        self.own_start: dict[int, int] = {}

    def value(self, node: Node, path: Path, depth: int) -> Any:
        self.count += 1
        if self.count > self.limit:
            self.check_expansion(node)
        if depth > MAX_DEPTH:
            raise _Refused(node, f"bad YAML: nested more than {MAX_DEPTH} levels deep")
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, ScalarNode):
            return self.scalar(node)
        if isinstance(node, SequenceNode):
            self.require_tag(node, _STANDARD + "seq")
            return [self.value(item, path + (index,), depth + 1)
                    for index, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            return self.mapping(node, path, depth)
        raise _Refused(node, f"bad YAML: unexpected node {node.id}")

    def check_expansion(self, node: Node) -> None:
        if not self.limit_known:  # counted only for documents past the floor
            self.limit_known = True
            # Without an alias each node is walked once and only MAX_VALUES can be passed;
            # FastLoader counts the aliases it composed, the pure loader does not.
            written = _distinct_nodes(self.root) if getattr(self.loader, "aliases", 1) else MAX_VALUES
            self.limit = min(MAX_VALUES, max(EXPANSION_FLOOR, EXPANSION_FACTOR * written))
            if self.count <= self.limit:
                return
        raise _Refused(node, f"bad YAML: aliases expand the document to more than {self.limit:,} "
                             f"values ({EXPANSION_FACTOR} per value written, at least "
                             f"{EXPANSION_FLOOR:,}, at most {MAX_VALUES:,})")

    def scalar(self, node: ScalarNode) -> Any:
        if node.tag == _STR:  # most values: what construct_object gives, without its bookkeeping
            return node.value
        if node.tag not in _SCALAR_TAGS:
            raise _Refused(node, _tag_message(node.tag))
        return self.loader.construct_object(node)

    def mapping(self, node: MappingNode, path: Path, depth: int) -> dict[str, Any]:
        self.require_tag(node, _STANDARD + "map")
        first_own = self.own_start.get(id(node))
        if first_own is None:
            own = sum(1 for key, _ in node.value if key.tag != _STANDARD + "merge")
            self.loader.flatten_mapping(node)  # merged pairs first, then the map's own
            first_own = self.own_start[id(node)] = len(node.value) - own
        result: dict[str, Any] = {}
        seen: set[str] = set()
        for position, (key_node, value_node) in enumerate(node.value):
            key = self.key(key_node)
            if position >= first_own:
                if key in seen:
                    raise _Refused(key_node, f"field '{_dotted(path + (key,))}' is given twice")
                seen.add(key)
            self.lines[path + (key,)] = key_node.start_mark.line + 1
            result[key] = self.value(value_node, path + (key,), depth + 1)
        return result

    def key(self, node: Node) -> str:
        if not isinstance(node, ScalarNode):
            raise _Refused(node, "bad YAML: a map key must be a plain name, not a list or map")
        if node.tag not in _SCALAR_TAGS:
            raise _Refused(node, _tag_message(node.tag))
        text: str = node.value  # a scalar node's value is its text, whatever its tag
        return text

    def require_tag(self, node: Node, tag: str) -> None:
        if node.tag != tag:
            raise _Refused(node, _tag_message(node.tag))


def _distinct_nodes(root: Node) -> int:
    """How many nodes the document holds as written: an aliased node counts once."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            stack.extend(part for pair in node.value for part in pair)
    return len(seen)


def _dotted(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _tag_message(tag: str) -> str:
    shown = "!!" + tag[len(_STANDARD):] if tag.startswith(_STANDARD) else tag
    return (f"YAML tag '{shown}' is not allowed: config files hold plain strings, "
            "numbers, booleans, lists and maps")
