"""The budget tree: validation errors name the bad node; shares multiply down the path."""

from __future__ import annotations

import math

import pytest

from apportion.core import ROOT, BudgetNode, BudgetTree, CoreError, ancestors, parent_of

from .helpers import make_tree


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([("a", 1.0), ("a", 2.0)], "budget 'a': path: duplicate"),
        ([("a", 0.0)], "budget 'a': weight: must be a number from 1e-06 to 1e"),
        ([("a/b", -1.0)], "budget 'a/b': weight: must be a number from 1e-06"),
        ([("a", float("nan"))], "budget 'a': weight: must be a number from 1e-06"),
        ([("a", float("inf"))], "budget 'a': weight: must be a number from 1e-06"),
        ([("a", 5e-324)], "budget 'a': weight: must be a number from 1e-06"),
        ([("a", 1e308), ("b", 1e308)], "budget 'a': weight: must be a number from"),
        ([("a", 1e6 * 1.0001)], "budget 'a': weight: must be a number from 1e-06 to 1e"),
        ([("a", 1e-3), ("b", 1e3), ("a/x", 1e-3), ("a/y", 1e3), ("a/x/p", 1e-3),
          ("a/x/q", 1e3)], "budget 'a/x/p': weight: its share of the cluster"),
        ([("", 1.0)], "budget '': path: must be names joined by '/'"),
        ([("/a", 1.0)], "budget '/a': path: must be names joined by '/'"),
        ([("a/", 1.0)], "budget 'a/': path: must be names joined by '/'"),
        ([("a//b", 1.0)], "budget 'a//b': path: must be names joined by '/'"),
        ([], "budget tree: must have at least one budget"),
    ],
)
def test_build_rejects_bad_nodes(nodes: list[tuple[str, float]], message: str) -> None:
    """Each malformed tree is refused with an error naming the node and the field."""
    with pytest.raises(CoreError) as err:
        BudgetTree.build(nodes)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ([("a", None, 1.0), ("b", "zz", 1.0)], "budget 'b': parent: unknown budget 'zz'"),
        ([("a", "b", 1.0), ("b", "a", 1.0)], "budget 'a': parent: cycle through 'a'"),
        ([("a", "a", 1.0)], "budget 'a': parent: cycle through 'a'"),
        ([("a", None, 1.0), ("a", None, 2.0)], "budget 'a': name: duplicate"),
        ([("a/b", None, 1.0)], "budget 'a/b': name: must be non-empty without '/'"),
        ([("", None, 1.0)], "budget '': name: must be non-empty without '/'"),
        ([("a", None, 0.0)], "budget 'a': weight: must be a number from 1e-06"),
    ],
)
def test_parent_links_reject_bad_rows(
    links: list[tuple[str, str | None, float]], message: str
) -> None:
    """Database-style rows: an unknown parent, a cycle or a duplicate is named."""
    with pytest.raises(CoreError) as err:
        BudgetTree.from_parent_links(links)
    assert message in str(err.value)


def test_parent_links_build_paths() -> None:
    """Rows with parents become slash-joined paths with the same weights."""
    tree = BudgetTree.from_parent_links(
        [("ai", None, 3.0), ("llm", "ai", 1.0), ("alice", "llm", 2.0), ("ops", None, 1.0)]
    )
    assert tree.leaves == ("ai/llm/alice", "ops")
    assert tree.weight("ai") == 3.0
    assert tree.share("ai/llm/alice") == pytest.approx(0.75)


def test_share_is_product_of_sibling_fractions() -> None:
    """The 35% example: 0.7 of the root, then 0.5 of that: a 35% claim on capacity."""
    tree = make_tree(("prog", 7.0), ("other", 3.0), ("prog/team", 1.0), ("prog/ops", 1.0))
    assert tree.share("prog") == pytest.approx(0.7)
    assert tree.share("prog/team") == pytest.approx(0.35)
    assert tree.share("prog/ops") == pytest.approx(0.35)
    assert tree.share("other") == pytest.approx(0.3)
    assert tree.share(ROOT) == 1.0


def test_leaf_shares_sum_to_one() -> None:
    """Whatever the weights, the leaves' shares add up to the whole cluster."""
    tree = make_tree(("a", 2.0), ("a/x", 0.5), ("a/y/z", 3.0), ("a/y/w", 1.0), ("b", 5.0))
    assert math.isclose(sum(tree.share(leaf) for leaf in tree.leaves), 1.0)


def test_missing_intermediate_nodes_get_weight_one() -> None:
    """Declaring only ``a/b/c`` creates ``a`` and ``a/b`` with weight 1."""
    tree = make_tree(("a/b/c", 4.0), ("d", 1.0))
    assert tree.weight("a") == 1.0 and tree.weight("a/b") == 1.0
    assert tree.leaves == ("a/b/c", "d")
    assert tree.share("a/b/c") == pytest.approx(0.5)


def test_nodes_parents_first_siblings_sorted() -> None:
    """``nodes()`` lists parents before children, siblings in name order."""
    tree = make_tree("b/y", "b/x", "a")
    assert tree.nodes() == ["a", "b", "b/x", "b/y"]
    assert tree.depth("b/x") == 2 and tree.depth("a") == 1


def test_require_leaf_names_the_budget() -> None:
    """Workloads draw on leaves: an unknown or inner budget is refused by name, an inner one
    with the nodes below it (the first three, then how many more)."""
    tree = make_tree("a/b", "c", "d/1", "d/2", "d/3", "d/4", "d/5")
    with pytest.raises(CoreError, match="budget 'nope': unknown budget"):
        tree.require_leaf("nope")
    with pytest.raises(CoreError) as e:
        tree.require_leaf("a")
    assert str(e.value) == ("budget 'a': not a leaf; workloads draw on leaf budgets (below "
                            "it: a/b)")
    with pytest.raises(CoreError) as e:
        tree.require_leaf("d")
    assert str(e.value).endswith("(below it: d/1, d/2, d/3 and 2 more)")
    tree.require_leaf("a/b")


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("p/t1/r1", "p/t2/r2", ("p/t1", "p/t2")),
        ("p/t1/r1", "p/t1/r2", ("p/t1/r1", "p/t1/r2")),
        ("p/t1/r1", "q", ("p", "q")),
        ("p/t1/r1", "p/t1/r1", None),
    ],
)
def test_divergence_is_the_sibling_pair_under_the_common_ancestor(
    a: str, b: str, expected: tuple[str, str] | None
) -> None:
    """Fair Tree compares two budgets at the level where their paths part."""
    tree = make_tree("p/t1/r1", "p/t1/r2", "p/t2/r2", "q")
    assert tree.divergence(a, b) == expected


def test_with_weight_copies_and_validates() -> None:
    """Changing one weight gives a new tree; the old one is untouched; bad input is named."""
    tree = make_tree("a", "b")
    new = tree.with_weight("a", 3.0)
    assert new.share("a") == pytest.approx(0.75) and tree.share("a") == pytest.approx(0.5)
    with pytest.raises(CoreError, match="budget 'zz': unknown budget"):
        tree.with_weight("zz", 1.0)
    with pytest.raises(CoreError, match="budget 'a': weight"):
        tree.with_weight("a", 0.0)


def test_ancestors_and_parent() -> None:
    """``ancestors`` runs leaf first, root last; the root is the empty path."""
    assert list(ancestors("a/b/c")) == ["a/b/c", "a/b", "a", ROOT]
    assert parent_of("a") == ROOT and parent_of("a/b") == "a"
    assert BudgetNode("x").weight == 1.0
