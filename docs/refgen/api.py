"""``api.md``: the Python client's public names, from their docstrings and signatures.

Every name of ``cluster.client.__all__``, grouped by the module that defines it (private and
shared modules' names under "Shared types and values"), then the typed errors of
``lograft.protocol.errors``. Signatures keep their annotations as written and lose memory addresses.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import logging
import pkgutil
import textwrap
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

import cluster.client
from lograft.protocol import errors
from refgen.markdown import GENERATED_NOTE, code_span, markdown, sanitize, summary, table

__all__ = ["render_api"]

log = logging.getLogger(__name__)


class _Raw(str):
    """Text shown as is in a signature (``inspect`` would quote a string annotation)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _annotation(annotation: object) -> _Raw:
    if isinstance(annotation, str):
        return _Raw(annotation)
    if isinstance(annotation, typing.ForwardRef):
        # A NamedTuple's fields, under ``from __future__ import annotations``.
        return _Raw(annotation.__forward_arg__)
    return _Raw(sanitize(inspect.formatannotation(annotation)))


def _signature(obj: Callable[..., Any], *, drop_first: bool = False, returns: bool = True) -> str:
    """``(a: int, b: str = 'x') -> bool`` with annotations as written, no addresses."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parameters = list(signature.parameters.values())
    if drop_first and parameters:
        parameters = parameters[1:]
    cleaned = []
    for parameter in parameters:
        changes: dict[str, Any] = {}
        if parameter.annotation is not inspect.Parameter.empty:
            changes["annotation"] = _annotation(parameter.annotation)
        if parameter.default is not inspect.Parameter.empty:
            changes["default"] = _Raw(sanitize(repr(parameter.default)))
        cleaned.append(parameter.replace(**changes))
    shown: object = inspect.Signature.empty
    if returns and signature.return_annotation is not inspect.Signature.empty:
        shown = _annotation(signature.return_annotation)
    return str(signature.replace(parameters=cleaned, return_annotation=shown))


def _attribute_docs(node_body: Sequence[ast.stmt], source: str) -> dict[str, tuple[str, str]]:
    """Names assigned in ``node_body`` → (assigned source text, the docstring after it)."""
    found: dict[str, tuple[str, str]] = {}
    for index, statement in enumerate(node_body):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(statement, ast.Assign):
            targets, value = list(statement.targets), statement.value
        elif isinstance(statement, ast.AnnAssign):
            targets, value = [statement.target], statement.value
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            doc = ""
            following = node_body[index + 1] if index + 1 < len(node_body) else None
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                doc = following.value.value
            text = ast.get_source_segment(source, value) if value is not None else None
            found[target.id] = (text or "", doc)
    return found


def _module_attributes(module: types.ModuleType) -> dict[str, tuple[str, str]]:
    source = inspect.getsource(module)
    return _attribute_docs(ast.parse(source).body, source)


def _class_attributes(cls: type) -> dict[str, tuple[str, str]]:
    source = textwrap.dedent(inspect.getsource(cls))
    tree = ast.parse(source)
    body = tree.body[0]
    if not isinstance(body, ast.ClassDef):
        return {}
    return _attribute_docs(body.body, source)


def _client_modules() -> list[types.ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(cluster.client.__path__))
    return [importlib.import_module(f"cluster.client.{name}") for name in names]


def _defined_line(obj: object) -> int:
    try:
        return inspect.getsourcelines(obj)[1]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return 0


def _is_dataclass_type(obj: object) -> bool:
    return isinstance(obj, type) and dataclasses.is_dataclass(obj)


def _render_dataclass_fields(cls: type) -> list[str]:
    attributes = _class_attributes(cls)
    hints = {f.name: f for f in dataclasses.fields(cls)}
    rows: list[tuple[str, ...]] = []
    for name, definition in hints.items():
        if definition.default is not dataclasses.MISSING:
            default = f"`{sanitize(repr(definition.default))}`"
        elif definition.default_factory is not dataclasses.MISSING:
            factory = getattr(definition.default_factory, "__name__", "factory")
            default = f"`{factory}()`"
        else:
            default = "required"
        kind = definition.type if isinstance(definition.type, str) else str(definition.type)
        description = summary(attributes.get(name, ("", ""))[1])
        rows.append((code_span(name), code_span(sanitize(kind)), default, description))
    header: tuple[str, ...] = ("field", "type", "default", "description")
    if not any(row[3] for row in rows):
        header, rows = header[:3], [row[:3] for row in rows]
    return ["", "Fields:", "", *table(header, rows)]


def _public_members(cls: type) -> list[tuple[str, Any]]:
    members: list[tuple[str, Any]] = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            members.append((name, member.__func__))
        elif inspect.isfunction(member) or isinstance(member, property):
            members.append((name, member))
    return members


def _protocols(cls: type) -> str:
    notes = []
    if "__enter__" in vars(cls):
        notes.append("a context manager (`with` closes it)")
    if "__iter__" in vars(cls):
        notes.append("iterable (`for item in x:`)")
    return "It is " + " and ".join(notes) + "." if notes else ""


def _render_class(name: str, cls: type, heading: str) -> list[str]:
    is_error = isinstance(cls, type) and issubclass(cls, BaseException)
    kind = "exception" if is_error else "class"
    lines = [f"{heading} `{name}`", "", "```python"]
    lines.append(f"{kind} {name}{_signature(cls, returns=False)}")
    lines += ["```", ""]
    doc = markdown(inspect.getdoc(cls) if cls.__doc__ else None)
    if doc:
        lines += [doc, ""]
    protocols = _protocols(cls)
    if protocols:
        lines += [protocols, ""]
    if _is_dataclass_type(cls):
        lines += _render_dataclass_fields(cls)[1:]
        lines.append("")
    for member_name, member in _public_members(cls):
        if isinstance(member, property):
            lines += [f"- **`{name}.{member_name}`** (property): {summary(member.__doc__)}"]
            continue
        drop_first = not isinstance(vars(cls)[member_name], staticmethod)
        lines += [
            f"{heading}# `{name}.{member_name}`",
            "",
            "```python",
            f"{'async def' if inspect.iscoroutinefunction(member) else 'def'} {member_name}"
            f"{_signature(member, drop_first=drop_first)}",
            "```",
            "",
        ]
        member_doc = markdown(member.__doc__)
        lines += [member_doc or "(no docstring)", ""]
    return lines


def _render_function(name: str, function: Callable[..., Any], heading: str) -> list[str]:
    lines = [f"{heading} `{name}`", "", "```python", f"def {name}{_signature(function)}", "```"]
    lines += ["", markdown(function.__doc__) or "(no docstring)", ""]
    return lines


def _render_value(name: str, value: object, heading: str) -> list[str]:
    for module in _client_modules():
        attributes = _module_attributes(module)
        if name in attributes and getattr(module, name, None) is value:
            text, doc = attributes[name]
            lines = [f"{heading} `{name}`", "", "```python", f"{name} = {text}", "```", ""]
            lines += [markdown(doc) or "(no docstring)", ""]
            return lines
    shown = sanitize(repr(value))
    return [f"{heading} `{name}`", "", "```python", f"{name} = {shown}", "```", ""]


_MODULE_ORDER = (
    "cluster.client.producer",
    "cluster.client.consumer",
    "cluster.client.admin",
    "cluster.client.partitioner",
)


def _home(obj: object) -> str:
    """The module a public name is documented under; private and outside ones are shared."""
    module = getattr(obj, "__module__", None)
    if (
        isinstance(obj, (type, types.FunctionType))
        and isinstance(module, str)
        and module.startswith("cluster.client.")
        and not module.rsplit(".", 1)[-1].startswith("_")
    ):
        return module
    return ""


def _errors_section() -> list[str]:
    classes = [
        cls
        for cls in (getattr(errors, name) for name in errors.__all__)
        if isinstance(cls, type) and issubclass(cls, errors.LograftError)
    ]
    classes.sort(key=lambda c: (c.code, c.__name__))
    lines = [
        "## Errors (`lograft.protocol.errors`)",
        "",
        markdown(errors.__doc__),
        "",
        "Every client failure is one of these classes (all subclasses of `LograftError`); "
        "`str(error)` starts with the Kafka name. Codes are Kafka's protocol error codes.",
        "",
    ]
    lines += table(
        ("class", "Kafka name", "code", "retriable", "meaning"),
        (
            (
                code_span(c.__name__),
                code_span(c.error_name),
                str(c.code),
                "yes" if c.retriable else "no",
                summary(c.__doc__),
            )
            for c in classes
        ),
    )
    lines.append("")
    lines += _render_function("error_for_code", errors.error_for_code, "###")
    return lines


def render_api() -> str:
    """The text of ``api.md``."""
    exported = {name: getattr(cluster.client, name) for name in cluster.client.__all__}
    groups: dict[str, list[str]] = {}
    for name, obj in exported.items():
        groups.setdefault(_home(obj), []).append(name)
    ordered = [m for m in _MODULE_ORDER if m in groups]
    ordered += sorted(m for m in groups if m and m not in _MODULE_ORDER)
    if "" in groups:
        ordered.append("")

    lines = [
        "# API reference: the Python client (`cluster.client`)",
        "",
        GENERATED_NOTE.format(
            source="the docstrings and signatures of cluster.client.__all__ and "
            "lograft.protocol.errors"
        ),
        "",
        markdown(cluster.client.__doc__),
        "",
        "Configuration names, defaults and valid values: "
        "[configuration reference](configuration.md#client-configs).",
        "",
        "## Contents",
        "",
    ]
    for module_name in ordered:
        title = module_name or "Shared types and values"
        listed = ", ".join(f"`{n}`" for n in groups[module_name])
        lines.append(f"- **{title}**: {listed}")
    lines += ["- **lograft.protocol.errors**: the typed errors", ""]

    for module_name in ordered:
        names = sorted(groups[module_name], key=lambda n: (_defined_line(exported[n]), n))
        if module_name:
            module = importlib.import_module(module_name)
            lines += [f"## `{module_name}`", "", markdown(module.__doc__), ""]
        else:
            lines += [
                "## Shared types and values",
                "",
                "Defined in shared modules and re-exported by `cluster.client`.",
                "",
            ]
        for name in names:
            obj = exported[name]
            if isinstance(obj, type):
                lines += _render_class(name, obj, "###")
            elif isinstance(obj, types.FunctionType):
                lines += _render_function(name, obj, "###")
            else:
                lines += _render_value(name, obj, "###")
    lines += _errors_section()
    return "\n".join(lines).rstrip() + "\n"
