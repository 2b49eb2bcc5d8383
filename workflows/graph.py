"""The DAG under a workflow definition: order, cycles, ancestors, descendants.

Plain functions over ``{key: parents}``. Orders are deterministic: among steps that could come
next, the one defined first comes first (Kahn's algorithm over the definition order), so every
list built from them (the order steps are evaluated in, the cycle named in an error) is the same
on every machine and every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def children_map(parents: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """``{key: its children}``, each list in definition order; unknown parents are ignored."""
    children: dict[str, list[str]] = {key: [] for key in parents}
    for key, ps in parents.items():
        for p in ps:
            if p in children and key not in children[p]:
                children[p].append(key)
    return {k: tuple(v) for k, v in children.items()}


def topological_order(parents: Mapping[str, Sequence[str]]) -> tuple[list[str], list[str]]:
    """(the steps in an order where each comes after its parents, the steps left out because
    they sit on or below a cycle). Unknown parents are ignored."""
    position = {key: i for i, key in enumerate(parents)}
    remaining = {k: len({p for p in ps if p in parents}) for k, ps in parents.items()}
    children = children_map(parents)
    ready = sorted((k for k, n in remaining.items() if n == 0), key=position.__getitem__)
    order: list[str] = []
    while ready:
        key = ready.pop(0)
        order.append(key)
        for child in children[key]:
            remaining[child] -= 1
            if remaining[child] == 0:
                ready.append(child)
                ready.sort(key=position.__getitem__)
    placed = set(order)
    return order, [k for k in parents if k not in placed]


def find_cycle(parents: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One cycle as ``[a, b, c, a]``, each step a parent of the next and the first the one
    defined first; None when the graph is acyclic.

    Every step Kahn's algorithm leaves out has a parent it also left out (that is why it was
    left out), so walking up such parents from any of them must come back to a step already
    seen: that loop is a cycle."""
    _, left = topological_order(parents)
    if not left:
        return None
    stuck = set(left)
    path, seen = [left[0]], {left[0]: 0}
    while True:
        up = next(p for p in parents[path[-1]] if p in stuck)
        if up in seen:
            loop = list(reversed(path[seen[up]:]))  # parent before child
            first = min(range(len(loop)), key=lambda i: left.index(loop[i]))
            loop = loop[first:] + loop[:first]
            return loop + [loop[0]]
        seen[up] = len(path)
        path.append(up)


def ancestors_map(parents: Mapping[str, Sequence[str]], order: Sequence[str]
                  ) -> dict[str, frozenset[str]]:
    """``{key: every step above it}`` for an acyclic graph in topological ``order``."""
    ancestors: dict[str, frozenset[str]] = {}
    for key in order:
        above: set[str] = set()
        for p in parents[key]:
            above.add(p)
            above |= ancestors[p]
        ancestors[key] = frozenset(above)
    return ancestors


def descendants_map(children: Mapping[str, Sequence[str]], order: Sequence[str]
                    ) -> dict[str, frozenset[str]]:
    """``{key: every step below it}`` for an acyclic graph in topological ``order``."""
    descendants: dict[str, frozenset[str]] = {}
    for key in reversed(order):
        below: set[str] = set()
        for c in children[key]:
            below.add(c)
            below |= descendants[c]
        descendants[key] = frozenset(below)
    return descendants
