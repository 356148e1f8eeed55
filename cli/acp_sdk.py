"""The official ACP SDK (``acp``), imported without reading its source once per model.

``acp.schema`` declares about 280 pydantic models with
``use_attribute_docstrings``: for each class pydantic finds its source
(``inspect`` and ``ast`` over the 5,800-line module) to copy the docstring
under each field into that field's ``description``. That is ~40% of the
SDK's import — about 0.6 of 1.4 CPU-seconds on the project's VM — paid by
every ``agentd acp`` an editor starts. The descriptions feed only JSON
Schema generation, which agentd never asks the SDK for; validation and
serialisation are the same without them.

Importing this module imports the SDK with that step skipped (a pydantic
hook put back at once). A pydantic without the hook gets the plain import.
Import it before ``acp`` anywhere agentd uses the SDK.
"""

from __future__ import annotations

import sys


def _import_sdk() -> None:
    if "acp.schema" in sys.modules:
        return  # imported already (with or without the step): nothing to gain
    try:
        from pydantic._internal import _fields
        hook = _fields._update_fields_from_docstrings
    except (ImportError, AttributeError):  # another pydantic: the plain import
        import acp  # noqa: F401
        return

    def without_docstrings(*args: object, **kwargs: object) -> None:
        return None

    _fields._update_fields_from_docstrings = without_docstrings
    try:
        import acp  # noqa: F401
        import acp.schema  # noqa: F401
    finally:
        _fields._update_fields_from_docstrings = hook


_import_sdk()
