"""ACP elicitation as agentd questions, and the person's answers back.

An agent asks the person with ``elicitation/create`` (ACP schema 1.x, mode
``form``: a message and a flat JSON Schema of primitive fields). Each field
becomes one question of a ``user_input`` request, the answers its accepted
``content``:

==============================  ===========================================
field                           question
==============================  ===========================================
``string`` with ``enum`` /      ``options`` (the values; a ``oneOf`` title
``oneOf``                       that differs rides in ``optionDetails``)
``string``                      free text
``boolean``                     ``options`` ``true`` / ``false``
``number``, ``integer``         free text, read as a number (``format``)
``array`` of ``enum`` /         ``options`` with ``multiple: true`` (the
``anyOf`` items                 answer: a list of them)
not in ``required``             ``optional: true`` — an empty answer leaves
                                it out of ``content``
==============================  ===========================================

Anything else (a URL elicitation, a field of another type, a form with no
fields) is :class:`Unsupported`: the connection answers the agent with an
error it sees, never leaves it waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Unsupported(Exception):
    """An elicitation agentd cannot ask the person (the message says why)."""


@dataclass
class Field:
    key: str
    kind: str  # string | number | integer | boolean | array
    required: bool


@dataclass
class Form:
    """A form elicitation as questions, and how to read their answers."""

    questions: list[dict[str, Any]]
    fields: list[Field]


def _choices(schema: dict[str, Any]) -> tuple[list[str], list[dict[str, str]]]:
    """A select's values (``enum``, or the ``const`` of each ``oneOf`` /
    ``anyOf`` entry) and the titles that say more than the value."""
    if isinstance(schema.get("enum"), list):
        return [str(v) for v in schema["enum"]], []
    entries = schema.get("oneOf") or schema.get("anyOf") or []
    values, details = [], []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and "const" in entry:
            value = str(entry["const"])
            values.append(value)
            title = entry.get("description") or entry.get("title")
            if title and str(title) != value:
                details.append({"label": value, "description": str(title)})
    return values, details


def form(message: str, schema: Any) -> Form:
    """The questions of a form elicitation's ``requestedSchema``.

    Raises:
        Unsupported: no fields, or a field agentd cannot ask.
    """
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or not properties:
        raise Unsupported("agentd cannot ask a form without fields")
    required = set(schema.get("required") or [])
    questions, fields = [], []
    for index, (key, prop) in enumerate(properties.items()):
        if not isinstance(prop, dict):
            raise Unsupported(f"field {key!r} has no schema")
        kind = prop.get("type")
        title = prop.get("title")
        # The message is the question of a form whose first field says no more than its title
        # (claude-agent-acp: one question's text is the message, its header the field's title).
        text = prop.get("description") or (message if index == 0 else None) or title or key
        question: dict[str, Any] = {"id": key, "question": str(text)}
        if title and str(title) != question["question"]:
            question["header"] = str(title)
        if kind == "string":
            values, details = _choices(prop)
            if values:
                question["options"] = values
                if details:
                    question["optionDetails"] = details
        elif kind == "boolean":
            question["options"] = ["true", "false"]
        elif kind in ("number", "integer"):
            question["format"] = kind
        elif kind == "array":
            items = prop.get("items")
            values, details = _choices(items if isinstance(items, dict) else {})
            if not values:
                raise Unsupported(f"field {key!r} is a list without choices, which agentd cannot ask")
            question.update(options=values, multiple=True, **({"optionDetails": details} if details else {}))
        else:
            raise Unsupported(f"field {key!r} has type {kind!r}, which agentd cannot ask")
        if key not in required:
            question["optional"] = True
        questions.append(question)
        fields.append(Field(key=key, kind=str(kind), required=key in required))
    return Form(questions=questions, fields=fields)


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == []


def content(asked: Form, answers: dict[str, Any]) -> dict[str, Any]:
    """The person's answers as the form's ``content``.

    Raises:
        ValueError: an answer is not of its field's type (the message names it).
    """
    out: dict[str, Any] = {}
    for f in asked.fields:
        value = answers.get(f.key)
        if _empty(value):
            if f.required:
                raise ValueError(f"field {f.key!r} needs an answer")
            continue
        if f.kind == "array":
            out[f.key] = [str(v) for v in value] if isinstance(value, list) else [str(value)]
            continue
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError(f"field {f.key!r} takes one answer, not {len(value)}")
            value = value[0]
        text = str(value).strip()
        if f.kind == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"the answer {text!r} to {f.key!r} is not true or false")
            out[f.key] = text.lower() == "true"
        elif f.kind in ("number", "integer"):
            try:
                out[f.key] = int(text) if f.kind == "integer" else float(text)
            except ValueError:
                raise ValueError(f"the answer {text!r} to {f.key!r} is not {'an integer' if f.kind == 'integer' else 'a number'}") from None
        else:
            out[f.key] = str(value)
    return out
