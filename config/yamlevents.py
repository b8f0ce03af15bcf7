"""Values and lines straight from libyaml's events, for the plain documents most config files are.

No node tree is composed: each event becomes its value at once, and its line goes into
the line map under its path, exactly as config/yamlsource.py's walker would have put it
(a map value takes its key's line, a list item its own). This reads only the subset
where that walk is simple, and raises `Unplain` for anything outside it, so the caller
reads the text again the slower way, whose answer (a value or an error) is the one given:

- an anchor, an alias, an explicit tag, a merge key (`<<`) or a `=` key;
- an empty plain value (libyaml marks its line differently from PyYAML);
- a key given twice, a key that is a list or a map;
- nesting past MAX_DEPTH or more than MAX_VALUES values;
- more than one document.

Syntax errors are libyaml's own yaml.YAMLError, which the caller answers the same way.
The walk keeps an explicit stack: nothing recurses, however deep the text nests.
"""

from __future__ import annotations

from typing import Any, Callable

from yaml.constructor import SafeConstructor
from yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

__all__ = ["Path", "Unplain", "read_events"]

Path = tuple[str | int, ...]  # where a value is: map keys and list indexes, from the root down

_STANDARD = "tag:yaml.org,2002:"
_STR = _STANDARD + "str"
_PLAIN_KEY_TAGS = {_STANDARD + name for name in ("str", "int", "float", "bool", "null", "timestamp")}
_KEY = object()  # a map's next event is a key


class Unplain(Exception):
    """The text is outside the plain subset: read it the slower way."""


class _Scalars:
    """Plain scalars resolved and constructed once per distinct text (the same few repeat)."""

    def __init__(self) -> None:
        self.resolver, self.constructor = Resolver(), SafeConstructor()
        self.values: dict[str, Any] = {}
        self.keys: set[str] = set()

    def value(self, text: str) -> Any:
        try:
            return self.values[text]
        except KeyError:
            pass
        tag = self.resolver.resolve(ScalarNode, text, (True, False))
        if tag == _STR:
            value: Any = text
        elif tag in _PLAIN_KEY_TAGS:  # numbers, booleans, null, timestamps: all immutable
            value = self.constructor.construct_object(ScalarNode(tag, text))
        else:  # `<<` or `=` as a value: the slower walk refuses it in its own words
            raise Unplain()
        self.values[text] = value
        return value

    def key(self, text: str) -> str:
        if text not in self.keys:  # `on:` is the key "on": only merge and value keys differ
            if self.resolver.resolve(ScalarNode, text, (True, False)) not in _PLAIN_KEY_TAGS:
                raise Unplain()
            self.keys.add(text)
        return text


def read_events(get_event: Callable[[], Any], max_depth: int, max_values: int) -> tuple[Any, dict[Path, int]]:
    """The single document's value and its lines {path: line}; (None, {}) for no document.

    :raises Unplain: outside the plain subset (see the module's text).
    :raises yaml.YAMLError: libyaml's syntax errors.
    """
    get_event()  # the stream's start
    event = get_event()
    if type(event) is StreamEndEvent:
        return None, {}
    if type(event) is not DocumentStartEvent:
        raise Unplain()
    value, lines = _document(get_event, max_depth, max_values)
    if type(get_event()) is not DocumentEndEvent or type(get_event()) is not StreamEndEvent:
        raise Unplain()  # a second document: the composer says so
    return value, lines


def _document(get_event: Callable[[], Any], max_depth: int, max_values: int) -> tuple[Any, dict[Path, int]]:
    scalars, lines = _Scalars(), dict[Path, int]()
    stack: list[tuple[Any, Path, Any]] = []  # (container, path, key) of each enclosing list or map
    container: Any = None  # the innermost open list or map; None at the root
    path: Path = ()  # the container's own path
    key: Any = None  # in a map: _KEY while a key comes next, then that key
    count = 0
    while True:
        event = get_event()
        kind = type(event)
        if key is _KEY:
            if kind is ScalarEvent:
                key = _key(event, scalars, container)
                lines[path + (key,)] = event.start_mark.line + 1
                continue
            if kind is not MappingEndEvent:
                raise Unplain()  # a list or a map as a key
        if kind is MappingEndEvent or kind is SequenceEndEvent:
            value = container
            container, path, key = stack.pop()
        else:
            count += 1
            if count > max_values or len(stack) > max_depth:
                raise Unplain()
            if type(container) is list:
                lines[path + (len(container),)] = event.start_mark.line + 1
            elif container is None:
                lines[()] = event.start_mark.line + 1
            if kind is ScalarEvent:
                value = _scalar(event, scalars)
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                if event.anchor is not None or event.tag is not None:
                    raise Unplain()
                stack.append((container, path, key))
                path = path if container is None else path + ((key,) if key is not None else (len(container),))
                container, key = ({}, _KEY) if kind is MappingStartEvent else ([], None)
                continue
            else:  # an alias
                raise Unplain()
        if container is None:
            return value, lines
        if key is None:
            container.append(value)
        else:
            container[key], key = value, _KEY


def _key(event: ScalarEvent, scalars: _Scalars, container: dict[str, Any]) -> str:
    text: str = event.value
    if event.anchor is not None or event.tag is not None or (not text and not event.style):
        raise Unplain()
    if event.implicit[0]:
        text = scalars.key(text)
    if text in container:
        raise Unplain()  # given twice: the slower walk names it
    return text


def _scalar(event: ScalarEvent, scalars: _Scalars) -> Any:
    if event.anchor is not None or event.tag is not None:
        raise Unplain()
    if not event.implicit[0]:  # quoted or a block: a string as written
        return event.value
    if not event.value and not event.style:
        raise Unplain()  # an empty plain value
    return scalars.value(event.value)
