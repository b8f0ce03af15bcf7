"""libyaml's parser (config/yamlsource.py FAST_LOADER) and the pure-Python SafeLoader
must read every document alike: the same values, the same line of every value, and for
a document either refuses, the same error text. The fast path must really be taken for
a valid document, and never crash on a deep one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from yaml.composer import Composer

import config.yamlsource
from config.model import ProjectConfigError
from config.yamlsource import load_yaml
from tests.config.helpers import text
from tests.config.test_file_errors import CASES

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("examples/configs/*.yaml"), ROOT / "tests/config/definitions/extra.yaml"])
EXAMPLES = int(os.environ.get("SUNDIAL_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

pytestmark = pytest.mark.skipif(config.yamlsource.FAST_LOADER is None, reason="libyaml is not installed")


def both(source: str) -> tuple[object, object]:
    """What load_yaml answers on the fast path and on the pure one: (value, lines) or the error texts."""
    answers = []
    for loader in (config.yamlsource.FAST_LOADER, None):
        saved, config.yamlsource.FAST_LOADER = config.yamlsource.FAST_LOADER, loader
        try:
            value, lines = load_yaml(source, "p.yaml")
            answers.append((value, lines.lines, lines.default))
        except ProjectConfigError as error:
            answers.append([str(each) for each in error.errors])
        finally:
            config.yamlsource.FAST_LOADER = saved
    return answers[0], answers[1]


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_the_example_configs_read_alike(path):
    fast, pure = both(path.read_text())
    assert isinstance(fast, tuple) and fast[1], "the example must load, with lines"
    assert fast == pure


@pytest.mark.parametrize("source", [case[1] for case in CASES], ids=[case[0] for case in CASES])
def test_the_file_error_cases_read_alike(source):
    fast, pure = both(text(source))
    assert fast == pure


FRAGMENTS = ["jobs:", "\n", "  ", "- ", "id: ", "a", "&x ", "*x", "<<: ", "{", "}", "[", "]", ", ",
             "? ", ": ", '"', "'", "|\n", ">-\n", "#c", "\t", "!!str ", "!!python/name:os.system ",
             "---\n", "...\n", "%YAML 1.1\n", "0x1F", "1e3", "yes", "~", "2026-01-01", "@d", "`",
             "\\", "\r\n", "\r", "\u00e9", "\ufeff", "\x85", "\u2028", "\x07", '\\x4', "\\u00e9", "\\N",
             "|2-\n", ">+\n", "%TAG ! tag:x,2000:\n", "!local ", "!<tag:yaml.org,2002:str> ", "k" * 1030, "- [",
             ":x", "-x", "?x", " #", "'it''s'", '"a\\"b"']


# Texts libyaml reads otherwise, found by the fuzz below: they must go to the pure loader.
@pytest.mark.parametrize("source", ["---\n  ", "jobs:\n  -\n\n  - 1\n", "\n\ufeff", "jobs:\t\n", "a: 1\n\t\n"])
def test_texts_libyaml_reads_otherwise_read_as_before(source):
    fast, pure = both(source)
    assert fast == pure


@FUZZ
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_any_text_reads_alike(source):
    fast, pure = both(source)
    assert fast == pure


@FUZZ
@given(st.recursive(st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none()),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                    max_leaves=30),
       st.booleans())
def test_any_structure_reads_alike_block_or_flow(document, flow):
    fast, pure = both(yaml.safe_dump({"jobs": [document]}, default_flow_style=flow, allow_unicode=True))
    assert fast == pure


def test_a_valid_document_is_read_by_libyaml(monkeypatch):
    def no_pure_loader(*_args, **_kwargs):
        raise AssertionError("the pure loader must not run for a valid document")

    monkeypatch.setattr(config.yamlsource.yaml, "SafeLoader", no_pure_loader)
    value, lines = load_yaml("jobs:\n  - id: a\n    target: {noop: {}}\n", "p.yaml")
    assert value == {"jobs": [{"id": "a", "target": {"noop": {}}}]}
    assert lines.line(("jobs", 0, "target", "noop")) == 3


def test_a_plain_document_is_read_from_the_events_without_composing(monkeypatch):
    def no_composer(*_args, **_kwargs):
        raise AssertionError("a plain document must not be composed into nodes")

    monkeypatch.setattr(config.yamlsource.FAST_LOADER, "compose_node", no_composer)
    value, lines = load_yaml("jobs:\n  - id: a\n    n: [1, on, '2']\n    target: {noop: {}}\n", "p.yaml")
    assert value == {"jobs": [{"id": "a", "n": [1, True, "2"], "target": {"noop": {}}}]}
    assert (lines.line(("jobs", 0)), lines.line(("jobs", 0, "n", 2)), lines.line(("jobs", 0, "target", "noop"))) \
        == (2, 3, 4)


@pytest.mark.parametrize("source", ["a: &x {b: 1}\nc: *x\n", "a: {b: 1, <<: {c: 2}}\n", "a: !!str 1\n",
                                    "a: 1\na: 2\n", "a:\n", "{[1]: 2}\n", "a\n---\nb\n", "= : 1\n"])
def test_what_the_events_do_not_read_is_composed_alike(source):
    fast, pure = both(source)
    assert fast == pure


def test_libyamls_recursive_composer_is_never_used():
    # libyaml's own composer recurses in C: a deep document would end the process.
    assert config.yamlsource.FAST_LOADER.get_single_node is Composer.get_single_node


@pytest.mark.parametrize("opener", ["[", "{a: ", "- "])
def test_a_very_deep_document_is_refused_not_a_crash(opener):
    closer = {"[": "]", "{a: ": "}", "- ": ""}[opener]
    source = opener * 100_000 + "x" + closer * 100_000
    with pytest.raises(ProjectConfigError) as refused:
        load_yaml(source, "p.yaml")
    assert [str(error) for error in refused.value.errors] == ["p.yaml:1: bad YAML: nested more than 64 levels deep"]


def test_without_libyaml_the_pure_loader_is_used(monkeypatch):
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    assert config.yamlsource._fast_loader() is None
