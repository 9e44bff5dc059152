"""JSON to and from the admin API's messages: the only conversion there is.

A message is a frozen dataclass of ``controller.api.messages``; its JSON is one
object with a key per field.  Decoding checks the object against the field
types themselves, so what the server accepts cannot drift from what the
dataclasses say:

- the body is one UTF-8 JSON object (an empty body is ``{}``);
- every key is a field of the message (else ``unknown field``);
- every value is of its field's kind: integers are JSON integers, never
  booleans; numbers may be either; lists are JSON arrays; maps are objects
  whose keys are strings, or decimal integers for an ``int`` key;
- a field whose type admits ``None`` may be absent or ``null``; every other
  field must be there;
- in a request (``capped``), integers fit in 64 bits (the state file stores
  sqlite's signed 64 bits) and strings have at most 256 characters.

Anything else is refused with ``InvalidRequest`` naming the field, before
the controller sees the request; ranges and references to jobs and hosts are
the controller's checks (``controller.api.validate``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
from dataclasses import dataclass
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from controller.errors import InvalidRequest
from esa.strictjson import unique_keys

T = TypeVar("T")

MAX_INT = 2**63 - 1
"""the state file stores integers as sqlite's signed 64 bits."""
MAX_TEXT = 256

_NOUNS: dict[Any, tuple[str, str]] = {
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    bool: ("a boolean", "booleans"),
    str: ("a string", "strings"),
}
_INT_KEY = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class MessageField:
    """One field of a message: its name, its type less ``None``, and whether
    it may be absent."""

    name: str
    type: Any
    optional: bool


_FIELDS: dict[type, tuple[MessageField, ...]] = {}


def fields_of(message: type) -> tuple[MessageField, ...]:
    """The fields of a message dataclass, in declaration order."""
    if message not in _FIELDS:
        _FIELDS[message] = _fields(message)
    return _FIELDS[message]


def _fields(message: type) -> tuple[MessageField, ...]:
    hints = get_type_hints(message)
    out = []
    for f in dataclasses.fields(message):
        tp = hints[f.name]
        args = get_args(tp)
        optional = get_origin(tp) in (Union, types.UnionType) and type(None) in args
        if optional:
            (tp,) = (a for a in args if a is not type(None))
        out.append(MessageField(f.name, tp, optional))
    return tuple(out)


def encode(value: Any) -> Any:
    """A message, or a value in one, as JSON data: objects for dataclasses,
    lists for tuples, string keys for maps."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    return value


def dumps(message: Any) -> bytes:
    return json.dumps(encode(message)).encode()


def parse(raw: bytes, what: str) -> dict[str, Any]:
    """The JSON object of a body (``{}`` when empty); ``what`` names it in errors."""
    if not raw:
        return {}
    try:
        data = json.loads(raw.decode(), object_pairs_hook=unique_keys)
    except UnicodeDecodeError:
        raise InvalidRequest(f"{what} is not UTF-8") from None
    except ValueError as e:
        raise InvalidRequest(f"{what} is not valid JSON: {e}") from None
    except RecursionError:
        raise InvalidRequest(f"{what} is nested too deeply") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"{what} must be a JSON object")
    return data


def loads(message: type[T], raw: bytes, where: str, capped: bool) -> T:
    """The ``message`` a body holds, checked field by field (``InvalidRequest``,
    prefixed with ``where``)."""
    data = parse(raw, "request" if capped else "reply")
    try:
        out: T = _message(message, data, "", capped)
    except _Refused as e:
        raise InvalidRequest(f"{where}: {e}") from None
    return out


class _Refused(Exception):
    """A value that does not fit its field (the message names the field)."""


def _noun(tp: Any) -> str:
    if get_origin(tp) is tuple:
        item = get_args(tp)[0]
        return f"a list of {_NOUNS[item][1] if item in _NOUNS else 'objects'}"
    return _NOUNS[tp][0] if tp in _NOUNS else "an object"


def _message(message: type, data: dict[str, Any], path: str, capped: bool) -> Any:
    fields = {f.name: f for f in fields_of(message)}
    values: dict[str, Any] = {f.name: None for f in fields.values() if f.optional}
    for key, value in data.items():
        f = fields.get(key)
        if f is None:
            known = ", ".join(fields) or "none"
            raise _Refused(f"unknown field {path + key[:40]!r} (fields: {known})")
        if value is not None:
            values[key] = _value(value, f.type, path + key, capped)
    for name in fields:
        if values.get(name) is None and not fields[name].optional:
            raise _Refused(f"field {path + name!r} is required")
    return message(**values)


def _value(value: Any, tp: Any, path: str, capped: bool) -> Any:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise _Refused(f"field {path!r} must be an object")
        return _message(tp, value, path + ".", capped)
    origin = get_origin(tp)
    if origin is tuple:
        return _list(value, tp, path, capped)
    if origin is dict:
        key_type, value_type = get_args(tp)
        if not isinstance(value, dict):
            raise _Refused(f"field {path!r} must be an object")
        return {
            _key(k, key_type, path): _value(v, value_type, f"{path}[{k[:40]!r}]", capped)
            for k, v in value.items()
        }
    if not _is_kind(value, tp):
        raise _Refused(f"field {path!r} must be {_noun(tp)}")
    _check_cap(value, path, capped)
    return float(value) if tp is float else value


def _list(value: Any, tp: Any, path: str, capped: bool) -> tuple[Any, ...]:
    """A list of scalars is checked as one field, a list of messages item by item."""
    item = get_args(tp)[0]
    if not isinstance(value, list):
        raise _Refused(f"field {path!r} must be {_noun(tp)}")
    if item not in _NOUNS:
        return tuple(_value(v, item, f"{path}[{i}]", capped) for i, v in enumerate(value))
    if not all(_is_kind(v, item) for v in value):
        raise _Refused(f"field {path!r} must be {_noun(tp)}")
    for v in value:
        _check_cap(v, path, capped)
    return tuple(float(v) if item is float else v for v in value)


def _key(key: str, tp: Any, path: str) -> Any:
    if tp is int:
        if not _INT_KEY.fullmatch(key):
            raise _Refused(f"field {path!r} has key {key[:40]!r}, which is not an integer")
        return int(key)
    return key


def _is_kind(value: Any, tp: Any) -> bool:
    if tp is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) if tp is float else isinstance(value, tp)


def _check_cap(value: Any, path: str, capped: bool) -> None:
    if not capped:
        return
    if isinstance(value, int) and not -MAX_INT - 1 <= value <= MAX_INT:
        raise _Refused(f"field {path!r} is out of range (64-bit integer)")
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise _Refused(f"field {path!r} has a string longer than {MAX_TEXT} characters")
