"""One error hierarchy: every error class cdc_assets defines derives from CdcError and says by its kind
whether the same call may succeed again, and no module raises a bare builtin RuntimeError."""
from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import re

import cdc_assets
from cdc_assets.core.errors import CdcError, TerminalError, TransientError

SKIP = {"cdc_assets.definitions"}  # the code location: it reads $CDC_ASSETS_CONFIG at import


def _error_classes() -> list[type]:
    found = []
    for module in pkgutil.walk_packages(cdc_assets.__path__, "cdc_assets."):
        if module.name in SKIP:
            continue
        mod = importlib.import_module(module.name)
        for name, obj in vars(mod).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == mod.__name__
                    and not name.startswith("_")):
                found.append(obj)
    return found


def test_every_error_class_derives_from_cdc_error_and_has_a_kind():
    classes = _error_classes()
    assert len(classes) >= 20
    outside = [c.__qualname__ for c in classes if not issubclass(c, CdcError)]
    assert outside == []
    kindless = [c.__qualname__ for c in classes
                if c not in (CdcError, TerminalError, TransientError)
                and not issubclass(c, (TerminalError, TransientError))]
    assert kindless == []


def test_no_module_raises_a_bare_builtin_error():
    """No bare RuntimeError or Exception anywhere, and no bare ValueError outside the core (whose value
    parsers raise it for config.py to name the table and field)."""
    root = pathlib.Path(cdc_assets.__file__).parent
    bare = [f"{p.relative_to(root)}:{n}" for p in sorted(root.rglob("*.py"))
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"\braise (RuntimeError|Exception)\(", line)
            or (p.parent.name != "core" and re.search(r"\braise ValueError\(", line))]
    assert bare == []
