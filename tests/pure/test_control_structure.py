"""The control plane is made of objects that hold one another (issue #33
item 3): ControlPlane holds an OperationRunner and the WeightUpdates, and
none of control/'s classes inherits from another of them or reaches into
another object's underscored members."""

from __future__ import annotations

import ast
import pathlib

import tokenwire.server.control

CONTROL = pathlib.Path(tokenwire.server.control.__file__).parent
MODULES = sorted(CONTROL.glob("*.py"))


def _reaches_in(tree: ast.AST) -> list[str]:
    """`x._name` where x is not self or cls: another object's protected member."""
    return [
        f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


def _control_classes() -> set[str]:
    return {
        node.name for path in MODULES for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }


def test_no_control_module_reaches_into_another_objects_protected_members() -> None:
    offenders = {
        path.name: found for path in MODULES
        if (found := _reaches_in(ast.parse(path.read_text())))
    }
    assert offenders == {}


def test_no_control_class_inherits_from_another() -> None:
    classes = _control_classes()
    inherits = {
        node.name: ast.unparse(base) for path in MODULES
        for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)
        for base in node.bases if ast.unparse(base).split(".")[-1] in classes
    }
    assert inherits == {}


def test_the_plane_holds_its_parts() -> None:
    from tokenwire.server.control.plane import ControlPlane
    from tokenwire.server.control.records import WeightRecord
    from tokenwire.server.control.runner import OperationRunner
    from tokenwire.server.control.weights import WeightUpdates
    from tokenwire.server.core.serving_state import ServingState

    plane = ControlPlane(object(), ServingState(), timeout=1.0,  # type: ignore[arg-type]
                         engine_requests=lambda: 0)
    assert isinstance(plane.runner, OperationRunner) and isinstance(plane.weights, WeightUpdates)
    assert isinstance(plane.record, WeightRecord) and plane.weights.record is plane.record


def test_the_checks_see_what_they_look_for() -> None:
    assert _reaches_in(ast.parse("plane._run(op)")) == ["1: plane._run"]
    assert _reaches_in(ast.parse("self._run(op); cls._x; x.__dict__")) == []
