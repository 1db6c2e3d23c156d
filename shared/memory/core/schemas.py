"""Optional pydantic schemas for namespace values.

A namespace declares ``schema="package.module:Model"`` (an importable pydantic
model; kept as a string so the declaration stays data and can be stored) or a
name registered with :meth:`Schemas.register`. Values are validated in strict
mode before anything is stored; a value that does not fit raises
:class:`SchemaViolation` naming the namespace, key and field.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from hrm_memory.core.errors import SchemaViolation, UnknownSchema
from hrm_memory.core.spec import SCHEMA_CLASSES, NamespaceSpec


class Schemas:
    def __init__(self) -> None:
        self._models: dict[str, Any] = {}
        self._lock = threading.Lock()

    def register(self, name: str, model: Any) -> None:
        """Make ``model`` (a pydantic BaseModel class) available as ``name``."""
        if not hasattr(model, "model_validate"):
            raise UnknownSchema(f"schema {name!r} is not a pydantic model", schema=name)
        with self._lock:
            self._models[name] = model

    def model(self, spec: NamespaceSpec) -> Any:
        name = spec.schema
        assert name is not None
        model = self._models.get(name) or SCHEMA_CLASSES.get(name)
        if model is None:
            module, sep, attr = name.partition(":")
            try:
                if not sep:
                    raise ImportError(name)
                model = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError):
                raise UnknownSchema(
                    f"namespace {spec.name!r}: schema {name!r} is neither registered nor importable "
                    "as 'package.module:Model'",
                    namespace=spec.name,
                    schema=name,
                ) from None
            self.register(name, model)
        return model

    def validate(self, spec: NamespaceSpec, key: str, value: Any) -> None:
        from pydantic import ValidationError

        model = self.model(spec)
        try:
            model.model_validate(value, strict=True)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)
            first = errors[0]
            field = ".".join(str(p) for p in first["loc"]) or "$"
            raise SchemaViolation(
                f"{spec.name}/{key!r}: field {field!r}: {first['msg']}"
                + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
                namespace=spec.name,
                key=key,
                field=field,
                errors=[{"field": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in errors],
            ) from None
