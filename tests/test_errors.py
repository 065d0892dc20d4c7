"""Every error of the package is defined in ``_errors.py`` and is a
``CheckpointGuardError``; the ones that were ``ValueError`` stay ``ValueError``."""

from __future__ import annotations

import inspect

import checkpoint_guard as cg
from checkpoint_guard import _errors
from checkpoint_guard.cache import _codec
from checkpoint_guard.maintenance import MaintenanceError


def test_every_error_lives_in_errors_module_and_shares_the_base() -> None:
    classes = [
        obj
        for _, obj in inspect.getmembers(_errors, inspect.isclass)
        # defined here, and shown as where users import them from
        if issubclass(obj, BaseException) and obj.__module__ == "checkpoint_guard"
    ]
    assert {cls.__name__ for cls in classes} == set(_errors.__all__)
    for cls in classes:
        assert issubclass(cls, cg.CheckpointGuardError), cls


def test_value_errors_keep_their_builtin_base() -> None:
    err = cg.ConfigError("backend", "x", "'memory'")
    assert isinstance(err, ValueError) and isinstance(err, cg.CheckpointGuardError)
    assert issubclass(_codec.CodecError, ValueError)
    assert issubclass(_codec.CodecError, cg.CheckpointGuardError)


def test_old_import_paths_are_the_same_classes() -> None:
    assert _codec.CodecError is _errors.CodecError
    assert MaintenanceError is _errors.MaintenanceError is cg.MaintenanceError
