"""No engine module imports another engine, directly or through other modules (the import graph)."""

from __future__ import annotations

import grimp
import pytest

from kvoffload.engines import each
from kvoffload.engines.registry import ENGINES, engine_modules

EACH = each.__name__


def _engine_of(module: str) -> str | None:
    """Return the engine (``kvoffload.engines.each.<name>``) a module belongs to, or None."""
    if not module.startswith(EACH + "."):
        return None
    return ".".join(module.split(".")[:4])


def _crossings(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Return (engine, module of another engine it imports, even indirectly) pairs."""
    engines = sorted({e for m in graph.modules if (e := _engine_of(m))})
    found = []
    for engine in engines:
        own = {m for m in graph.modules if _engine_of(m) == engine}
        reached = set().union(*(graph.find_upstream_modules(m) for m in own))
        found += [(engine, m) for m in sorted(reached) if _engine_of(m) not in (None, engine)]
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    """The package's import graph, as import-linter builds it."""
    return grimp.build_graph("kvoffload")


def test_every_module_of_each_is_an_engine() -> None:
    """Each module of engines.each declares one engine, and the registry holds all of them."""
    assert [m.ENGINE.name for m in engine_modules()] == list(ENGINES)


def test_no_engine_imports_another(graph: grimp.ImportGraph) -> None:
    """No module of one engine reaches a module of a sibling engine in the import graph."""
    engines = {e for m in graph.modules if (e := _engine_of(m))}
    assert len(engines) == len(ENGINES)
    assert _crossings(graph) == []


def test_an_indirect_import_through_a_shared_module_is_found() -> None:
    """The check follows chains: an engine importing a helper that imports another engine fails."""
    graph = grimp.build_graph("kvoffload")
    graph.add_import(importer="kvoffload.engines.prefix_cache", imported=f"{EACH}.flexgen.policy")
    assert (f"{EACH}.vllm", f"{EACH}.flexgen.policy") in _crossings(graph)
