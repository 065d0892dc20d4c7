"""Sync and async twins stay identical, mechanically.

Every pair of functions in one scope (a module or a class) named ``x`` / ``ax``
(also ``_x`` / ``_ax`` and ``__x__`` / ``__ax__``), and every such pair across a
class ``X`` and its async twin ``AsyncX`` in one module, is compared as syntax trees
once the async one is turned back into sync code: ``await e`` -> ``e``,
``async for`` / ``async with`` / async comprehensions -> their sync forms, every
name ``ax`` whose twin ``x`` the sync function uses -> ``x`` (names, attributes,
keywords and string constants), ``AsyncIterator`` -> ``Iterator`` and the like,
``[v async for v in it]`` -> ``list(it)`` and ``async for v in it: yield v`` -> ``yield
from it``. Docstrings are ignored.

Two shapes pass without comparison: an async twin that only calls its sync twin
(a bridge cannot drift), and a pair on ``ALLOWED`` below, each with the reason
its halves must differ. Anything else that differs fails, with a diff: editing
one twin only is caught.
"""

from __future__ import annotations

import ast
import copy
import difflib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "checkpoint_guard"

RENAMES = {
    "AsyncIterator": "Iterator",
    "AsyncGenerator": "Generator",
    "AsyncIterable": "Iterable",
    "asynccontextmanager": "contextmanager",
    "AsyncExitStack": "ExitStack",
    "AsyncConnection": "Connection",  # psycopg
}

# "path:scope.name" (the sync name) -> why the twins legitimately differ
ALLOWED: dict[str, str] = {
    # each differs in one thing only the async side has (an event loop, an awaitable)
    "maintenance/_retention.py:<module>.retention": (
        "background sweeping runs on the stack's event loop; a sync stack has none"
    ),
    # base-layer plumbing
    "savers/_layer.py:SaverLayer.setup": "asetup awaits whatever setup returned",
    "savers/_guard.py:_TakeFresh.run": (
        "a refused graph's clean-up waits for its writes: the async side in a thread, as "
        "they may be tasks of its own event loop"
    ),
    "stores/_sqlite.py:SqliteRows._locked": (
        "SqliteSaver.setup must run under the saver's thread lock; AsyncSqliteSaver.setup "
        "takes its (not reentrant) asyncio lock itself, so it runs before; a sqlite3 cursor "
        "is closed with closing(), an aiosqlite one is an async context manager"
    ),
}

# Pairs that must be found (the discovery must not silently find nothing).
EXPECTED = {
    "savers/_history.py:CachedHistorySaver.put_writes",
    "savers/_history.py:CachedHistorySaver.get_tuple",
    "savers/_guard.py:GuardedSaver.put",
    "maintenance/_ops.py:<module>.prune",
    "state/_lineage.py:<module>.find_checkpoint_before_message",
    "state/_accessor.py:StateAccessor.get",
    "cache/_redis.py:RedisHistoryCache.close",
    "cache/_redis.py:_Eval.run",
    "cache/_protocol.py:HistoryCache.begin",
    "stores/__init__.py:<module>.open_inner",
    # retention: the sweep and the row operations it drives, sync class vs async class
    "maintenance/_sweep.py:<module>.sweep",
    "maintenance/_ops.py:_RowRequest.run",
    "maintenance/_ops.py:Pause.run",
    "maintenance/_ops.py:Seal.run",
    "stores/_rows.py:Sql.run",
    "stores/_sqlite.py:SqliteRows.transact",
    "stores/_postgres.py:PostgresRows.transact",
}


def _sync_name(name: str, known: set[str]) -> str:
    if name in RENAMES:
        return RENAMES[name]
    for prefix in ("__a", "_a", "a"):
        if name.startswith(prefix):
            candidate = prefix[:-1] + name[len(prefix) :]
            if candidate in known:
                return candidate
    return name


def _names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            out.add(n.name)
        elif isinstance(n, ast.keyword) and n.arg:
            out.add(n.arg)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
    return out


class _Desugar(ast.NodeTransformer):
    """Both sides: spellings that mean the same."""

    def visit_For(self, node: ast.For) -> ast.AST:
        # ``for v in it: yield v`` is ``yield from it`` (an async generator's only spelling)
        self.generic_visit(node)
        [stmt] = node.body if len(node.body) == 1 and not node.orelse else [None]
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Yield)
            and isinstance(stmt.value.value, ast.Name)
            and isinstance(node.target, ast.Name)
            and stmt.value.value.id == node.target.id
        ):
            return ast.copy_location(ast.Expr(ast.YieldFrom(node.iter)), node)
        return node

    def visit_ListComp(self, node: ast.ListComp) -> ast.AST:
        self.generic_visit(node)
        [gen] = node.generators if len(node.generators) == 1 else [None]
        if (
            gen is not None
            and not gen.ifs
            and isinstance(gen.target, ast.Name)
            and isinstance(node.elt, ast.Name)
            and gen.target.id == node.elt.id
        ):
            call = ast.Call(func=ast.Name(id="list", ctx=ast.Load()), args=[gen.iter], keywords=[])
            return ast.copy_location(call, node)
        return node


class _Unasync(ast.NodeTransformer):
    """The async side back to sync code."""

    def __init__(self, known: set[str]) -> None:
        self.known = known

    def visit_Await(self, node: ast.Await) -> ast.AST:
        return self.visit(node.value)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        self.generic_visit(node)
        fields = {f: getattr(node, f) for f in node._fields if f != "name"}  # 3.12: type_params
        fn = ast.FunctionDef(name=_sync_name(node.name, self.known), **fields)
        return ast.copy_location(fn, node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> ast.AST:
        self.generic_visit(node)
        loop = ast.For(
            target=node.target,
            iter=node.iter,
            body=node.body,
            orelse=node.orelse,
            type_comment=None,
        )
        return ast.copy_location(loop, node)

    def visit_AsyncWith(self, node: ast.AsyncWith) -> ast.AST:
        self.generic_visit(node)
        return ast.copy_location(ast.With(items=node.items, body=node.body), node)

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        node.is_async = 0
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = _sync_name(node.id, self.known)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        node.attr = _sync_name(node.attr, self.known)
        return node

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        self.generic_visit(node)
        if node.arg:
            node.arg = _sync_name(node.arg, self.known)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str):
            node.value = _sync_name(node.value, self.known)
        return node


def _without_docstring(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
    fn = copy.deepcopy(fn)
    first = fn.body[0] if fn.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        fn.body = fn.body[1:] or [ast.Pass()]
    if ast.dump(ast.Module(fn.body, [])) == ast.dump(ast.parse("...")):
        fn.body = [ast.Pass()]  # a stub: as empty as a docstring-only body
    return fn


def _is_bridge(async_fn: ast.AsyncFunctionDef, sync_name: str) -> bool:
    """An async twin whose whole body calls its sync twin (``self.x(...)``/``x(...)``)."""
    body = _without_docstring(async_fn).body  # type: ignore[attr-defined]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    call = body[0].value
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == sync_name) or (
        isinstance(func, ast.Name) and func.id == sync_name
    )


def _functions(body: list[ast.stmt]) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _pairs() -> dict[str, tuple[ast.FunctionDef, ast.AsyncFunctionDef]]:
    """Twins in one scope (``x``/``ax`` in a module or a class) and across a class
    pair of one module (``X.x`` / ``AsyncX.ax``: a sync class and its async twin),
    keyed by the sync side."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        scopes = [("<module>", tree.body, tree.body)] + [
            (name, cls.body, cls.body) for name, cls in classes.items()
        ]
        scopes += [
            (name[len("Async") :], classes[name[len("Async") :]].body, cls.body)
            for name, cls in classes.items()
            if name.startswith("Async") and name[len("Async") :] in classes
        ]
        for scope, sync_body, async_body in scopes:
            sync_fns, async_fns = _functions(sync_body), _functions(async_body)
            for name, fn in async_fns.items():
                if not isinstance(fn, ast.AsyncFunctionDef):
                    continue
                for prefix in ("__a", "_a", "a"):
                    twin = (
                        sync_fns.get(prefix[:-1] + name[len(prefix) :])
                        if name.startswith(prefix)
                        else None
                    )
                    if isinstance(twin, ast.FunctionDef):
                        found[f"{path.relative_to(PACKAGE)}:{scope}.{twin.name}"] = (twin, fn)
                        break
    return found


PAIRS = _pairs()


def twin_diff(sync_fn: ast.FunctionDef, async_fn: ast.AsyncFunctionDef) -> list[str]:
    """The unified diff between ``sync_fn`` and the sync reading of ``async_fn``."""
    sync_tree = _Desugar().visit(_without_docstring(sync_fn))
    known = _names(sync_tree)
    async_tree = _Desugar().visit(_Unasync(known).visit(_without_docstring(async_fn)))
    left = ast.unparse(sync_tree).splitlines()
    right = ast.unparse(async_tree).splitlines()
    return list(difflib.unified_diff(left, right, "sync", "async (unasynced)", lineterm="", n=1))


def test_the_expected_pairs_are_found() -> None:
    assert set(PAIRS) >= EXPECTED, sorted(EXPECTED - set(PAIRS))
    assert set(PAIRS) >= set(ALLOWED), sorted(set(ALLOWED) - set(PAIRS))


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_twins_are_identical(pair: str) -> None:
    sync_fn, async_fn = PAIRS[pair]
    if _is_bridge(async_fn, sync_fn.name):
        return
    diff = twin_diff(sync_fn, async_fn)
    if pair in ALLOWED:
        assert diff, f"{pair} is allowed to differ but no longer does: drop it from ALLOWED"
        return
    assert not diff, "\n".join([f"{pair}: the twins differ", *diff])


def test_a_one_sided_edit_is_caught() -> None:
    """Dropping the try/finally around one twin's last step (the drift the sync
    put_writes once had) makes identical twins differ."""
    pair = "savers/_history.py:SharedCacheFence._sealed"
    sync_fn, async_fn = PAIRS[pair]
    assert pair not in ALLOWED and twin_diff(sync_fn, async_fn) == []
    edited = copy.deepcopy(sync_fn)
    [guarded] = [n for n in edited.body if isinstance(n, ast.Try) and n.finalbody]
    i = edited.body.index(guarded)
    edited.body[i : i + 1] = guarded.body + guarded.finalbody
    diff = twin_diff(edited, async_fn)
    assert any(line.startswith("+") and "try:" in line for line in diff), diff
