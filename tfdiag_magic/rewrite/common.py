"""Shared pieces of the cell rewrites: parsing a cell, checking a result, import aliases, diffs.

Every rewrite goes through `rewrite_cell`: it splits off a leading ``%%tfprofile`` line, parses
the rest with libcst (so comments and layout survive), runs the transform and returns the new
cell only when it differs from the old one and compiles.
"""

from __future__ import annotations

import ast
import difflib
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import (
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from .namespace import modules_bound

MAGIC_PREFIX = "%%tfprofile"

# Statements that own a block of statements; a loop's "body" is the IndentedBlock below it.
Loop = cst.For | cst.While


@dataclass
class Cell:
    """A parsed cell: the kept ``%%tfprofile`` line (or ""), the Python body and its tree."""

    header: str
    body: str
    module: cst.Module

    @property
    def line_offset(self) -> int:
        """How many lines of the given source precede the Python body."""
        return 1 if self.header else 0

    @functools.cached_property
    def _metadata(self) -> dict:
        wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        return wrapper.resolve_many([PositionProvider, ParentNodeProvider])

    def line(self, node: cst.CSTNode) -> int:
        """The 1-based line of `node` in the given source (the magic line counts)."""
        return self._metadata[PositionProvider][node].start.line + self.line_offset

    def end_line(self, node: cst.CSTNode) -> int:
        """The last line of `node` in the given source."""
        return self._metadata[PositionProvider][node].end.line + self.line_offset

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._metadata[ParentNodeProvider].get(node)

    @functools.cached_property
    def scopes(self) -> set[Scope]:
        """The cell's scopes, as libcst's `ScopeProvider` finds them."""
        return scopes_of(self.module)

    @functools.cached_property
    def loads(self) -> list[cst.Name]:
        """Every name the cell reads (attributes and keywords are not names read)."""
        return _loads(self.scopes)

    def bindings(self, name: str) -> int:
        """How many times the cell binds `name`, in any scope (parameters not counted)."""
        return sum(
            a.name == name and not isinstance(a.node, cst.Param)
            for scope in self.scopes
            for a in scope.assignments
        )

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)


def split_magic_line(source: str) -> tuple[str, str]:
    """Split a leading ``%%tfprofile ...`` line (kept verbatim) from the Python body."""
    if source.startswith(MAGIC_PREFIX):
        newline = source.find("\n")
        if newline == -1:
            return source + "\n", ""
        return source[: newline + 1], source[newline + 1 :]
    return "", source


def parse_cell(source: str) -> Cell | None:
    """Parse a cell, or None when its Python does not parse or compile (IPython magics etc.)."""
    header, body = split_magic_line(source)
    if not compiles(body):
        return None
    try:
        module = cst.parse_module(body)
    except (cst.ParserSyntaxError, SyntaxError):
        return None
    return Cell(header, body, module)


def compiles(code: str) -> bool:
    try:
        compile(code, "<cell>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def finish(cell: Cell, new: cst.Module | str | None) -> str | None:
    """The full rewritten cell, or None when nothing changed or the result does not compile."""
    if new is None:
        return None
    code = new.code if isinstance(new, cst.Module) else new
    if code == cell.body or not compiles(code):
        return None
    return cell.header + code


def rewrite_cell(source: str, transform: Callable[[Cell], cst.Module | None]) -> str | None:
    """Parse `source`, apply `transform` to it, and check the result (see `finish`)."""
    cell = parse_cell(source)
    if cell is None:
        return None
    return finish(cell, transform(cell))


def unified_diff(before: str, after: str) -> str:
    """A unified diff from `before` to `after`, every line ending with a newline."""

    def lines(text: str) -> list[str]:
        return [line if line.endswith("\n") else line + "\n" for line in text.splitlines(True)]

    return "".join(
        difflib.unified_diff(lines(before), lines(after), "cell", "cell (rewritten)", n=3)
    )


# --- source text and names ------------------------------------------------------------------

_EMPTY = cst.Module([])


def code_of(node: cst.CSTNode) -> str:
    """The source text of a node on its own."""
    return _EMPTY.code_for_node(node)


def expr_ast(node: cst.BaseExpression) -> ast.expr:
    return ast.parse("(" + code_of(node) + "\n)", mode="eval").body


def same_expr(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """Whether two expressions are the same code, ignoring layout and comments."""
    return ast.dump(expr_ast(a)) == ast.dump(expr_ast(b))


def _scopes(scope_of: Mapping[cst.CSTNode, Scope | None]) -> set[Scope]:
    return {scope for scope in scope_of.values() if scope is not None}


def _loads(scopes: Iterable[Scope]) -> list[cst.Name]:
    return [a.node for s in scopes for a in s.accesses if isinstance(a.node, cst.Name)]


def scopes_of(node: cst.CSTNode) -> set[Scope]:
    """The scopes libcst finds in `node` analysed on its own (as a module of its own)."""
    if isinstance(node, cst.BaseExpression):
        node = cst.Expr(node)
    if isinstance(node, cst.BaseSmallStatement):
        node = cst.SimpleStatementLine([node])
    if not isinstance(node, cst.Module):
        body = [node] if isinstance(node, cst.BaseStatement) else block_statements(node)
        node = cst.Module(body=body)
    return _scopes(MetadataWrapper(node, unsafe_skip_copy=True).resolve(ScopeProvider))


def loaded_names(node: cst.CSTNode) -> set[str]:
    """Names read anywhere in `node` (nested function bodies included)."""
    return {name.value for name in _loads(scopes_of(node))}


def stored_names(node: cst.CSTNode) -> set[str]:
    """Names bound anywhere in `node`: assignments, loop and with targets, defs, imports."""
    return {
        a.name
        for scope in scopes_of(node)
        for a in scope.assignments
        if not isinstance(a.node, cst.Param) and "." not in a.name
    }


def all_names(node: cst.CSTNode) -> set[str]:
    """Every identifier used in `node` (read, bound, attribute or keyword), less the module
    paths of its imports (``keras`` of ``from keras import layers`` binds no name)."""
    imports = m.findall(node, m.ImportAlias())
    paths = [alias.name for alias in imports]
    paths += [i.module for i in m.findall(node, m.ImportFrom(module=m.DoNotCare()))]
    in_paths = {id(n) for path in paths for n in m.findall(path, m.Name())}
    names = {n.value for n in m.findall(node, m.Name()) if id(n) not in in_paths}
    return names | {_bound_by(alias) for alias in imports}


def _bound_by(alias: cst.ImportAlias) -> str:
    return alias.evaluated_alias or alias.evaluated_name.split(".")[0]


def fresh_name(module: cst.Module, preferred: Sequence[str]) -> str:
    """The first of `preferred` not used anywhere in the cell, else the first with a suffix."""
    used = all_names(module)
    for name in preferred:
        if name not in used:
            return name
    base = preferred[0]
    index = 2
    while f"{base}_{index}" in used:
        index += 1
    return f"{base}_{index}"


def dotted(expr: cst.CSTNode | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = dotted(expr.value)
        return None if base is None else f"{base}.{expr.attr.value}"
    return None


def method_name(call: cst.CSTNode) -> str | None:
    """The attribute a method call ends with (``fit`` for ``anything.fit(...)``)."""
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
        return call.func.attr.value
    return None


def parse_expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def parse_stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def parse_stmts(code: str) -> list[cst.BaseStatement]:
    return list(cst.parse_module(code).body)


# --- arguments --------------------------------------------------------------------------------


def find_kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional_args(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def remove_args(call: cst.Call, doomed: Iterable[cst.Arg]) -> cst.Call:
    """`call` without the given arguments, commas kept tidy (a trailing comma stays trailing)."""
    doomed_ids = {id(a) for a in doomed}
    args = list(call.args)
    kept = [a for a in args if id(a) not in doomed_ids]
    if kept and id(args[-1]) in doomed_ids:
        # The new last argument takes the comma (trailing or none) of the old last one, less
        # the comment that was about the argument removed.
        comma = args[-1].comma
        if isinstance(comma, cst.Comma) and isinstance(
            comma.whitespace_after, cst.ParenthesizedWhitespace
        ):
            after = comma.whitespace_after
            comma = comma.with_changes(
                whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace())
            )
        kept[-1] = kept[-1].with_changes(comma=comma)
    return call.with_changes(args=kept)


def set_kwarg(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with keyword `name` set to `value`: replaced in place, or appended at the end."""
    existing = find_kwarg(call, name)
    if existing is not None:
        return call.with_changes(
            args=[a.with_changes(value=value) if a is existing else a for a in call.args]
        )
    args = list(call.args)
    new_arg = cst.Arg(
        keyword=cst.Name(name),
        value=value,
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    if not args:
        return call.with_changes(args=[new_arg])
    last = args[-1]
    between = _comma_between(call, args)
    if isinstance(last.comma, cst.Comma):
        # A trailing comma (usually one argument per line): the new one follows the same style.
        new_arg = new_arg.with_changes(comma=last.comma)
    # Whatever stood between the last argument and ")" now follows the new one.
    new_arg = new_arg.with_changes(whitespace_after_arg=last.whitespace_after_arg)
    args[-1] = last.with_changes(comma=between, whitespace_after_arg=cst.SimpleWhitespace(""))
    return call.with_changes(args=[*args, new_arg])


def _comma_between(call: cst.Call, args: list[cst.Arg]) -> cst.Comma:
    """The comma (and line break, if any) the call puts between arguments, without comments."""
    for arg in args[:-1]:
        if isinstance(arg.comma, cst.Comma):
            return _without_comment(arg.comma)
    after_paren = call.whitespace_before_args
    if isinstance(after_paren, cst.ParenthesizedWhitespace):
        # One argument on its own line: the next one goes on a line of its own, indented alike.
        return cst.Comma(whitespace_after=after_paren.with_changes(empty_lines=[]))
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _without_comment(comma: cst.Comma) -> cst.Comma:
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace):
        return comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
        )
    return comma


def int_value(expr: cst.CSTNode | None) -> int | None:
    """The value of a plain integer literal, else None."""
    if isinstance(expr, cst.Integer):
        return int(expr.value.replace("_", ""), 0)
    return None


# --- imports and aliases --------------------------------------------------------------------


@dataclass
class Aliases:
    """Which local names the cell binds to modules and imported objects."""

    imported: dict[str, str]  # local name -> fully qualified name, from the cell's imports
    module_names: set[str]  # every identifier the cell uses

    def module_alias(self, module: str) -> str | None:
        """The local name bound to `module` itself (``tf`` for ``import tensorflow as tf``)."""
        for local, qualified in self.imported.items():
            if qualified == module:
                return local
        return None

    @property
    def tf(self) -> str | None:
        return self.module_alias("tensorflow")

    @property
    def np(self) -> str | None:
        return self.module_alias("numpy")

    def qualify(self, name: str | None) -> str | None:
        """The fully qualified form of a dotted name, through the cell's imports."""
        if name is None:
            return None
        head, _, rest = name.partition(".")
        base = self.imported.get(head)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def keras_name(self, name: str | None) -> str | None:
        """`name` as a path inside Keras (``layers.Dense``), when it names a Keras object."""
        qualified = self.qualify(name)
        if qualified is None:
            return None
        for prefix in ("tensorflow.keras.", "tensorflow.python.keras.", "tf_keras.", "keras.src."):
            if qualified.startswith(prefix):
                return qualified[len(prefix) :]
        if qualified.startswith("keras."):
            return qualified[len("keras.") :]
        return None

    def keras(self, module: cst.Module) -> str | None:
        """How the cell spells the Keras module: ``tf.keras`` when it uses that, else ``keras``."""
        tf = self.tf
        if tf is not None and _uses_attribute(module, tf, "keras"):
            return f"{tf}.keras"
        for local, qualified in self.imported.items():
            if qualified in ("keras", "tensorflow.keras"):
                return local
        if tf is not None:
            return f"{tf}.keras"
        return None


def _uses_attribute(module: cst.Module, base: str, attr: str) -> bool:
    return bool(m.findall(module, m.Attribute(value=m.Name(base), attr=m.Name(attr))))


def aliases(module: cst.Module) -> Aliases:
    outside = modules_bound()
    return _aliases(module, tuple(sorted(outside.items())) if outside else ())


@functools.lru_cache(maxsize=16)
def _aliases(module: cst.Module, outside: tuple[tuple[str, str], ...]) -> Aliases:
    imported: dict[str, str] = {}
    for node in m.findall(module, m.Import() | m.ImportFrom(relative=[], module=m.DoNotCare())):
        if isinstance(node.names, cst.ImportStar):
            continue
        for alias in node.names:
            if isinstance(node, cst.ImportFrom):
                imported[_bound_by(alias)] = f"{dotted(node.module)}.{alias.evaluated_name}"
            else:  # ``import a.b`` binds ``a``; ``import a.b as c`` binds ``c`` to ``a.b``
                name = alias.evaluated_name
                imported[_bound_by(alias)] = name if alias.evaluated_alias else name.split(".")[0]
    used = all_names(module)
    if outside:
        bound = stored_names(module)
        for name, qualified in outside:
            if name in used and name not in imported and name not in bound:
                imported[name] = qualified
    return Aliases(imported, used)


def import_alias(module: cst.Module, qualified: str, alias: str) -> tuple[str, bool] | None:
    """The local name to use for module `qualified` and whether an import must be added.

    The cell's own alias when it imports the module; else `alias`, unless the cell already uses
    that name for something else (None).
    """
    known = aliases(module)
    existing = known.module_alias(qualified)
    if existing is not None:
        return existing, False
    if alias in known.module_names or alias in known.imported:
        return None
    return alias, True


def add_import(module: cst.Module, qualified: str, alias: str) -> cst.Module:
    """`module` with ``import QUALIFIED as ALIAS`` among its leading imports (libcst's
    `AddImportsVisitor`: after a docstring and ``from __future__`` imports)."""
    context = CodemodContext()
    AddImportsVisitor.add_needed_import(
        context, qualified, asname=None if alias == qualified else alias
    )
    return _AddImports(context).transform_module(module)


class _AddImports(AddImportsVisitor):
    """`AddImportsVisitor` less the blank line it puts below the imports: the layout stays."""

    def _insert_empty_line(self, statements):  # type: ignore[override]
        return statements


def ensure_import(module: cst.Module, qualified: str, alias: str) -> tuple[cst.Module, str] | None:
    """The module with ``import QUALIFIED as ALIAS`` (unless already imported) and the local name.

    Call it before adding code that uses the alias. None when `alias` is taken in the cell.
    """
    found = import_alias(module, qualified, alias)
    if found is None:
        return None
    name, missing = found
    return (add_import(module, qualified, name) if missing else module), name


# --- tree walking and editing ---------------------------------------------------------------


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node below `node` (itself included), parents before children, in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def walk_skipping_defs(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Like `walk`, but does not enter function, lambda or class bodies below `node`."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if current is not node and isinstance(current, cst.FunctionDef | cst.ClassDef | cst.Lambda):
            continue
        stack.extend(reversed(current.children))


def block_statements(block: cst.CSTNode) -> list[cst.BaseStatement]:
    """The statements of a Module, IndentedBlock or one-line suite."""
    if isinstance(block, cst.Module | cst.IndentedBlock):
        return list(block.body)
    if isinstance(block, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=list(block.body))]
    return []


def small_statements(statement: cst.CSTNode) -> list[cst.BaseSmallStatement]:
    """The small statements of a simple statement line (``a = 1; b = 2``), else []."""
    if isinstance(statement, cst.SimpleStatementLine):
        return list(statement.body)
    return []


def single_small(statement: cst.CSTNode) -> cst.BaseSmallStatement | None:
    """The only small statement of a one-statement line, else None."""
    smalls = small_statements(statement)
    return smalls[0] if len(smalls) == 1 else None


def loop_body(loop: Loop) -> list[cst.BaseStatement]:
    return block_statements(loop.body)


class _Replace(cst.CSTTransformer):
    def __init__(self, edits: dict[int, object]) -> None:
        super().__init__()
        self.edits = edits

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        edit = self.edits.get(id(original_node))
        if (
            isinstance(updated_node, cst.SimpleStatementLine)
            and updated_node.body
            and len(updated_node.body) < len(original_node.body)
        ):
            # A small statement was removed: the line's new last one needs no semicolon.
            last = updated_node.body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            updated_node = updated_node.with_changes(body=[*updated_node.body[:-1], last])
        if edit is None:
            return updated_node
        if callable(edit):
            return edit(updated_node)
        return edit


def replace(module: cst.Module, edits: dict[cst.CSTNode, object]) -> cst.Module:
    """Apply edits keyed by original node: a new node, a sentinel, or a function of the node
    after its own children were edited (so nested edits compose)."""
    return module.visit(_Replace({id(node): edit for node, edit in edits.items()}))


def insert_before(
    edits: dict[cst.CSTNode, object],
    statement: cst.CSTNode,
    new: Sequence[cst.BaseStatement],
    *,
    copy_blank_lines: bool = False,
) -> None:
    """Record an edit that puts `new` statements before `statement` (composes with others).

    Blank lines above `statement` move above the new code (`copy_blank_lines`: they are
    repeated, so the new code is set apart from it as well).
    """
    previous = edits.get(statement)

    def edit(node):
        if callable(previous):
            node = previous(node)
        elif previous is not None:
            node = previous
        if isinstance(node, cst.FlattenSentinel):
            # Earlier insertions stay first; the original statement stays last.
            nodes = list(node.nodes)
            return cst.FlattenSentinel([*nodes[:-1], *new, nodes[-1]])
        # Blank lines above the statement now go above the inserted code; comments stay.
        leading = list(getattr(node, "leading_lines", []))
        blank = 0
        while blank < len(leading) and leading[blank].comment is None:
            blank += 1
        if not blank or not new:
            return cst.FlattenSentinel([*new, node])
        first = new[0].with_changes(leading_lines=[*leading[:blank], *new[0].leading_lines])
        rest = node if copy_blank_lines else node.with_changes(leading_lines=leading[blank:])
        return cst.FlattenSentinel([first, *new[1:], rest])

    edits[statement] = edit


def enclosing_loops(cell: Cell, node: cst.CSTNode) -> list[Loop]:
    """Loops around `node`, innermost first, up to the nearest enclosing def or class.

    A node in a loop's ``else:`` or in the iterable of a ``for`` does not count as inside it.
    """
    loops: list[Loop] = []
    child = node
    for parent in cell.ancestors(node):
        if isinstance(parent, cst.FunctionDef | cst.ClassDef | cst.Lambda):
            break
        if isinstance(parent, cst.For | cst.While) and child is parent.body:
            loops.append(parent)
        child = parent
    return loops


def loops_in(node: cst.CSTNode) -> list[Loop]:
    return [n for n in walk(node) if isinstance(n, cst.For | cst.While)]


def loop_at_line(cell: Cell, lineno: int) -> Loop | None:
    for loop in loops_in(cell.module):
        if cell.line(loop) == lineno:
            return loop
    return None


def remove(edits: dict[cst.CSTNode, object], nodes: Iterable[cst.CSTNode]) -> None:
    """Record edits removing statements or small statements (``a = 1`` of ``a = 1; b = 2``).

    A line left empty disappears and a block left empty gets ``pass``.
    """
    for node in nodes:
        edits[node] = cst.RemovalSentinel.REMOVE


def leading_comment(text: str) -> list[cst.EmptyLine]:
    """Comment lines (``# ...``) to put above a statement."""
    return [
        cst.EmptyLine(comment=cst.Comment("# " + line if line else "#"))
        for line in text.splitlines()
    ]


def loads_after(cell: Cell, names: Iterable[str], node: cst.CSTNode) -> set[str]:
    """Which of `names` are read in the cell on a line after `node` ends."""
    wanted, last = set(names), cell.end_line(node)
    return {n.value for n in cell.loads if n.value in wanted and cell.line(n) > last}


def without(node: cst.CSTNode, statement: cst.CSTNode) -> cst.CSTNode:
    """`node` with `statement` (somewhere below it) taken out."""

    class Drop(cst.CSTTransformer):
        def on_leave(self, original, updated):
            return cst.RemovalSentinel.REMOVE if original is statement else updated

    return node.visit(Drop())


def hoist_target(
    cell: Cell, statement: cst.CSTNode, reads: set[str], binds: set[str]
) -> Loop | None:
    """The outermost loop that `statement` (directly in a loop body) can move in front of.

    It can leave a loop when nothing else in that loop assigns a name it reads or binds, and
    (for the innermost loop) the loop reads none of the names it binds before it runs.
    """
    loops = enclosing_loops(cell, statement)
    if not loops or cell.parent(statement) is not loops[0].body:
        return None
    for other in loop_body(loops[0]):
        if other is statement:
            break
        if binds & loaded_names(other):
            return None
    target = None
    for loop in loops:
        assigned = stored_names(without(loop, statement))
        if (reads | binds) & assigned:
            break
        target = loop
    return target
