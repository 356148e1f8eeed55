"""The ACP SDK's import without pydantic's docstring pass (cli/acp_sdk.py).

Every ``agentd acp`` an editor starts imports the SDK; its ~280 models'
field docstrings cost ~40% of that import and only feed JSON Schema. Each
probe runs in a fresh interpreter: the import happens once per process.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = r"""
import json
from pydantic._internal import _fields
hook = _fields._update_fields_from_docstrings
import agentd.acp_agent
from acp import schema
request = schema.InitializeRequest.model_validate({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}})
print(json.dumps({
    "hook_restored": _fields._update_fields_from_docstrings is hook,
    "description": schema.PromptResponse.model_fields["stop_reason"].description,
    "dumped": schema.PromptResponse(stop_reason="end_turn").model_dump(by_alias=True, exclude_none=True),
    "validated": [request.protocol_version, request.client_capabilities.fs.read_text_file],
}))
"""


def probe(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_agentd_acp_imports_the_sdk_without_field_docstrings_and_its_models_work():
    seen = probe(PROBE)
    assert seen["description"] is None, "the docstring pass ran"
    assert seen["hook_restored"], "pydantic's hook was left replaced: models made later would lose their docstrings"
    assert seen["dumped"] == {"stopReason": "end_turn"}
    assert seen["validated"] == [1, True]

