"""Editing goondan.yaml's dependencies keeps the rest of the file as it was."""

from __future__ import annotations

import pytest

from goondan.bundle.depedit import (
    EditError,
    read_dependencies,
    remove_dependency,
    set_dependency,
)

BUNDLE = """\
# My bundle: comments stay.
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: demo
spec:
  version: "0.1.0"   # ours
  dependencies:
    # the built-in tools
    - name: "@goondan/base"
      version: "*"
  access: public
---
kind: Model
metadata: {name: fast}
spec: {provider: scripted, model: scripted-v1}
"""


def test_add_appends_an_item_and_keeps_comments_and_order() -> None:
    new = set_dependency(BUNDLE, "@acme/search", "^1.2.0", "demo")
    assert new == BUNDLE.replace(
        '      version: "*"\n',
        '      version: "*"\n    - name: "@acme/search"\n      version: "^1.2.0"\n',
    )
    assert read_dependencies(new) == [("@goondan/base", "*"), ("@acme/search", "^1.2.0")]


def test_add_again_replaces_only_the_version() -> None:
    once = set_dependency(BUNDLE, "@acme/search", "^1.2.0", "demo")
    twice = set_dependency(once, "@acme/search", "~1.3", "demo")
    assert twice == once.replace('"^1.2.0"', '"~1.3"')


def test_remove_deletes_the_item_lines_only() -> None:
    added = set_dependency(BUNDLE, "@acme/search", "^1.2.0", "demo")
    assert remove_dependency(added, "@acme/search") == BUNDLE
    gone = remove_dependency(BUNDLE, "@goondan/base")
    assert read_dependencies(gone) == []
    assert "# My bundle: comments stay." in gone and "access: public" in gone
    with pytest.raises(EditError, match="no dependency @acme/x"):
        remove_dependency(BUNDLE, "@acme/x")


def test_flow_style_lists_stay_flow() -> None:
    text = BUNDLE.replace(
        '  dependencies:\n    # the built-in tools\n    - name: "@goondan/base"\n'
        '      version: "*"\n',
        '  dependencies: [{name: "@goondan/base", version: "*"}]  # flow\n',
    )
    new = set_dependency(text, "@acme/search", "1.x", "demo")
    assert '  dependencies: [{name: "@goondan/base", version: "*"}, ' in new
    assert "# flow" in new
    assert read_dependencies(new)[-1] == ("@acme/search", "1.x")


def test_a_package_without_dependencies_or_spec_gains_them() -> None:
    no_deps = "kind: Package\nmetadata:\n  name: demo\nspec:\n  version: '1.0.0'\n---\nkind: X\n"
    new = set_dependency(no_deps, "@acme/search", "^1.0.0", "demo")
    assert new.startswith("kind: Package\nmetadata:\n  name: demo\nspec:\n  version: '1.0.0'\n")
    assert read_dependencies(new) == [("@acme/search", "^1.0.0")]
    no_spec = "kind: Package\nmetadata:\n  name: demo\n---\nkind: X\n"
    assert read_dependencies(set_dependency(no_spec, "a", "*", "demo")) == [("a", "*")]


def test_a_bundle_without_a_package_document_gets_one() -> None:
    text = "# models\nkind: Model\nmetadata: {name: fast}\n"
    new = set_dependency(text, "@acme/search", "^1.2.0", "my-bundle")
    assert new.endswith("---\n" + text)
    assert read_dependencies(new) == [("@acme/search", "^1.2.0")]
    assert 'name: "my-bundle"' in new


def test_an_empty_dependencies_key_is_filled() -> None:
    text = "kind: Package\nmetadata:\n  name: demo\nspec:\n  dependencies:\n  version: '1'\n"
    new = set_dependency(text, "b", "^2", "demo")
    assert read_dependencies(new) == [("b", "^2")]
    assert "version: '1'" in new
