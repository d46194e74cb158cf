"""Encode event and state dataclasses to JSON and back, exactly.

Payloads live in JSON columns (timer rows, outbox rows, saga state) for days before they
are read back, usually by another process and often by a newer release. The codec is
therefore *type-directed*: each field's annotation says how its value is written and how
it is restored, so ``decode(cls, encode(obj)) == obj`` holds for every supported type, and
the wire format is plain JSON that PostgreSQL ``jsonb`` stores without loss.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Decimal``,
``UUID``, ``datetime``, ``date``, ``Enum`` subclasses whose values are ``str`` or ``int``,
nested dataclasses (self-references included), ``list[T]``, ``tuple[T, ...]``,
``tuple[A, B]``, ``dict[K, V]`` with ``K`` one of ``str``, ``int``, ``UUID`` or a str- or
int-valued ``Enum``, ``Optional[T]`` / ``T | None``, and ``NewType`` over any of these.
Anything else (``Any``, ``bytes``, ``set``, other unions, plain classes) is a ``TypeError``
when the class is declared (``check_dataclass``) or first encoded — never when a stored row
is read back.

What the wire format looks like:

- ``bool`` is not ``int``: ``True`` in an ``int`` field (or ``1`` in a ``bool`` field) is a
  ``TypeError``, because it would come back as a different type.
- ``str`` must not hold a NUL character or a lone surrogate (``"\\ud800"``): PostgreSQL
  cannot store either, so they are a ``TypeError`` here on every backend.
- ``float`` accepts ``int`` values up to 2**53 in magnitude (beyond that a float cannot
  hold every int exactly, so a larger one is a ``TypeError``) and always decodes to
  ``float``. NaN, ±infinity and ``-0.0`` are written as the strings ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"`` and ``"-0.0"``: JSON has no literal for the first three
  and ``jsonb`` numerics drop the sign of zero. A JSON integer in a ``float`` field is
  accepted (``jsonb`` prints ``1e20`` as ``100000000000000000000``).
- ``Decimal`` is written as its ``str()``, which keeps the exponent (``"1.00"``,
  ``"1E+2"``) and the special values.
- ``datetime`` is written with ``isoformat()`` (microseconds and UTC offset kept). An aware
  value comes back with a fixed-offset ``tzinfo``: the same instant and the same offset,
  not the same zone object.
- Dict keys are JSON object keys, hence strings; ``decode`` turns them back. An error
  inside a dict names the entry by its position (``Order.totals[entry 2]``), not its key.
- Fields declared with ``init=False`` are derived in ``__post_init__``; they are neither
  written nor read.

``decode`` ignores keys it does not know (a newer release may have added a field) and
fills missing fields from their defaults, ``default_factory`` included.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

__all__ = ["check_dataclass", "decode", "encode", "unstorable_text"]

T = TypeVar("T")

_NONE_TYPE = type(None)

_SUPPORTED = (
    "str, int, float, bool, None, Decimal, UUID, datetime, date, Enum subclasses with str "
    "or int values, dataclasses, list[T], tuple[T, ...], dict[K, V] and Optional[T]"
)

_SPECIAL_FLOATS: dict[str, float] = {
    "NaN": math.nan,
    "Infinity": math.inf,
    "-Infinity": -math.inf,
    "-0.0": -0.0,
}


# --- errors ---------------------------------------------------------------------------


class _Invalid(Exception):
    """A value does not fit its annotation.

    The field path is collected while the error unwinds (each container appends its own
    segment), so the success path pays nothing for it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []

    def at(self, segment: str) -> _Invalid:
        self.path.append(segment)
        return self

    def where(self, root: type[Any]) -> str:
        return root.__name__ + "".join(reversed(self.path))


class _Unsupported(Exception):
    """An annotation (or a part of one) the codec cannot round-trip."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _name(cls: type[Any]) -> str:
    # Qualified for nested classes (Order.Line), but without a function's "<locals>".
    return cls.__qualname__.rpartition("<locals>.")[2]


def _describe(annotation: object) -> str:
    """Spell *annotation* as it is written in source: ``dict[Region, list[int]]``."""
    if annotation is None or annotation is _NONE_TYPE:
        return "None"
    if annotation is Ellipsis:
        return "..."
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_describe(arg) for arg in args)
    if origin is not None and args:
        return f"{_describe(origin)}[{', '.join(_describe(arg) for arg in args)}]"
    if isinstance(annotation, type):
        return _name(annotation)
    return repr(annotation).replace("typing.", "")


def _json_kind(data: object) -> str:
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "boolean"
    if isinstance(data, int | float):
        return "number"
    if isinstance(data, str):
        return "string"
    if isinstance(data, list):
        return "array"
    if isinstance(data, Mapping):
        return "object"
    return _name(type(data))


# Messages name the offending *type*, never the value: payloads carry personal data and
# these messages end up in logs and in the dead-letter column.
def _wrong_value(expected: str, value: object) -> _Invalid:
    return _Invalid(f"expected {expected}, got {_name(type(value))}")


def _wrong_json(expected: str, data: object) -> _Invalid:
    return _Invalid(f"expected {expected}, got JSON {_json_kind(data)}")


# --- codecs for single annotations ----------------------------------------------------


class _Codec(ABC):
    __slots__ = ()

    @abstractmethod
    def encode(self, value: Any) -> Any:
        """Return the JSON form of *value*, or raise ``_Invalid``."""

    @abstractmethod
    def decode(self, data: Any) -> Any:
        """Return the value stored as *data*, or raise ``_Invalid``."""

    def nested_dataclasses(self) -> Iterator[type[Any]]:
        """Yield the dataclasses this annotation refers to (for ``check_dataclass``)."""
        return iter(())


class _Exact(_Codec):
    """``str``, ``int`` and ``bool``: JSON-native, but only the exact type.

    Subclasses are refused because they would come back as the base type: ``True`` is an
    ``int`` and an ``IntEnum`` member is one too.
    """

    __slots__ = ("json_name", "kind")

    def __init__(self, kind: type[Any], json_name: str) -> None:
        self.kind = kind
        self.json_name = json_name

    def encode(self, value: Any) -> Any:
        if type(value) is not self.kind:
            raise _wrong_value(self.kind.__name__, value)
        return value

    def decode(self, data: Any) -> Any:
        if type(data) is not self.kind:
            raise _wrong_json(f"a JSON {self.json_name}", data)
        return data


# PostgreSQL cannot store either in a text or jsonb value (``DataError`` /
# ``UnicodeEncodeError``), while SQLite would: refused here, so that every backend behaves
# the same and the failure is the caller's ``TypeError`` at publish, not a poisoned
# transaction at commit.
_UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")


def unstorable_text(text: str) -> str | None:
    """Say why a database could not store ``text`` (without quoting it); ``None``: it can."""
    if text.isascii():
        if "\x00" in text:
            return "str holds a NUL character, which PostgreSQL cannot store"
        return None
    if _UNSTORABLE_TEXT.search(text) is not None:
        return "str holds a NUL character or a lone surrogate, which PostgreSQL cannot store"
    return None


class _TextCodec(_Exact):
    """``str``: exactly ``str``, and only text every backend can store."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(str, "string")

    def encode(self, value: Any) -> Any:
        text = super().encode(value)
        problem = unstorable_text(text)
        if problem is not None:
            raise _Invalid(problem)
        return text


class _NoneCodec(_Codec):
    __slots__ = ()

    def encode(self, value: Any) -> Any:
        if value is not None:
            raise _wrong_value("None", value)
        return None

    def decode(self, data: Any) -> Any:
        if data is not None:
            raise _wrong_json("JSON null", data)
        return None


def _encode_float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0.0 and math.copysign(1.0, value) < 0:
        return "-0.0"
    return value


# The largest magnitude up to which every int has an exact float (IEEE 754 binary64).
_FLOAT_EXACT_INT_LIMIT = 2**53


class _FloatCodec(_Codec):
    __slots__ = ()

    def encode(self, value: Any) -> Any:
        if type(value) is int:  # an int is a valid float value (PEP 484); bool is not
            if abs(value) > _FLOAT_EXACT_INT_LIMIT:
                raise _Invalid(
                    "int value is too large for a float field: above 2**53 in magnitude a "
                    "float cannot hold it exactly (use an int or Decimal field)"
                )
            return float(value)
        if not isinstance(value, float):
            raise _wrong_value("float", value)
        return _encode_float(float(value))

    def decode(self, data: Any) -> Any:
        if type(data) is float:
            return data
        if type(data) is int:
            try:
                return float(data)
            except OverflowError:
                raise _Invalid("JSON integer is too large for a float field") from None
        if type(data) is str:
            try:
                return _SPECIAL_FLOATS[data]
            except KeyError:
                raise _Invalid(
                    'expected a JSON number or one of "NaN", "Infinity", "-Infinity", "-0.0"'
                ) from None
        raise _wrong_json("a JSON number", data)


class _DecimalCodec(_Codec):
    __slots__ = ()

    def encode(self, value: Any) -> Any:
        if not isinstance(value, Decimal):
            raise _wrong_value("Decimal", value)
        return str(value)  # exact: keeps the exponent ("1.00", "1E+2") and NaN/Infinity

    def decode(self, data: Any) -> Any:
        if type(data) is not str:
            raise _wrong_json("a JSON string holding a Decimal", data)
        try:
            return Decimal(data)
        except InvalidOperation:
            raise _Invalid("string is not a valid Decimal") from None


class _UUIDCodec(_Codec):
    __slots__ = ()

    def encode(self, value: Any) -> Any:
        if not isinstance(value, UUID):
            raise _wrong_value("UUID", value)
        return str(value)

    def decode(self, data: Any) -> Any:
        if type(data) is not str:
            raise _wrong_json("a JSON string holding a UUID", data)
        try:
            return UUID(data)
        except ValueError:
            raise _Invalid("string is not a valid UUID") from None


class _DateTimeCodec(_Codec):
    """``datetime``; subclasses are accepted (freezegun's ``FakeDatetime`` is one)."""

    __slots__ = ()

    def encode(self, value: Any) -> Any:
        if not isinstance(value, datetime):
            raise _wrong_value("datetime", value)
        return value.isoformat()

    def decode(self, data: Any) -> Any:
        if type(data) is not str:
            raise _wrong_json("a JSON string holding an ISO 8601 datetime", data)
        try:
            parsed = datetime.fromisoformat(data)
        except ValueError:
            raise _Invalid("string is not an ISO 8601 datetime") from None
        # Python 3.11's fromisoformat drops the fraction of an offset like
        # "+00:00:00.000001", which isoformat() writes; restore it exactly.
        fractional = _FRACTIONAL_OFFSET.search(data)
        if fractional is not None:
            sign = -1 if fractional["sign"] == "-" else 1
            offset = timedelta(
                hours=int(fractional["h"]),
                minutes=int(fractional["m"]),
                seconds=int(fractional["s"]),
                microseconds=int(fractional["us"].ljust(6, "0")),
            )
            parsed = parsed.replace(tzinfo=timezone(sign * offset))
        return parsed


_FRACTIONAL_OFFSET = re.compile(
    r"(?P<sign>[+-])(?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})\.(?P<us>\d{1,6})$"
)


class _DateCodec(_Codec):
    __slots__ = ()

    def encode(self, value: Any) -> Any:
        # datetime subclasses date; storing one in a date field would drop its time.
        if not isinstance(value, date) or isinstance(value, datetime):
            raise _wrong_value("date", value)
        return value.isoformat()

    def decode(self, data: Any) -> Any:
        if type(data) is not str:
            raise _wrong_json("a JSON string holding an ISO 8601 date", data)
        try:
            return date.fromisoformat(data)
        except ValueError:
            raise _Invalid("string is not an ISO 8601 date") from None


class _EnumCodec(_Codec):
    """An ``Enum`` stored as its member's value (a ``str`` or an ``int``)."""

    __slots__ = ("enum",)

    def __init__(self, enum: type[Enum]) -> None:
        for member in enum.__members__.values():
            if type(member.value) not in (str, int):
                raise _Unsupported(
                    f"{_name(enum)}.{member.name} has a "
                    f"{_name(type(member.value))} value; enum values must be str or int"
                )
        self.enum = enum

    def encode(self, value: Any) -> Any:
        if not isinstance(value, self.enum):
            raise _wrong_value(_name(self.enum), value)
        return value.value

    def decode(self, data: Any) -> Any:
        if type(data) not in (str, int):
            raise _wrong_json(f"a JSON string or integer ({_name(self.enum)})", data)
        try:
            return self.enum(data)
        except ValueError:
            raise _Invalid(f"value is not a member of {_name(self.enum)}") from None


class _OptionalCodec(_Codec):
    __slots__ = ("inner",)

    def __init__(self, inner: _Codec) -> None:
        self.inner = inner

    def encode(self, value: Any) -> Any:
        return None if value is None else self.inner.encode(value)

    def decode(self, data: Any) -> Any:
        return None if data is None else self.inner.decode(data)

    def nested_dataclasses(self) -> Iterator[type[Any]]:
        return self.inner.nested_dataclasses()


class _ListCodec(_Codec):
    __slots__ = ("item",)

    def __init__(self, item: _Codec) -> None:
        self.item = item

    def encode(self, value: Any) -> Any:
        if not isinstance(value, list):
            raise _wrong_value("list", value)
        return _encode_items(self.item, value)

    def decode(self, data: Any) -> Any:
        if not isinstance(data, list):
            raise _wrong_json("a JSON array", data)
        return _decode_items(self.item, data)

    def nested_dataclasses(self) -> Iterator[type[Any]]:
        return self.item.nested_dataclasses()


class _TupleCodec(_Codec):
    """``tuple[T, ...]`` (``items`` is None) or a fixed ``tuple[A, B, ...]``."""

    __slots__ = ("item", "items")

    def __init__(self, item: _Codec | None, items: tuple[_Codec, ...] | None) -> None:
        self.item = item
        self.items = items

    def _check_length(self, length: int) -> None:
        if self.items is not None and length != len(self.items):
            raise _Invalid(f"expected {len(self.items)} items, got {length}")

    def encode(self, value: Any) -> Any:
        if not isinstance(value, tuple):
            raise _wrong_value("tuple", value)
        self._check_length(len(value))
        if self.item is not None:
            return _encode_items(self.item, value)
        assert self.items is not None
        return [
            _encode_item(codec, index, item)
            for index, (codec, item) in enumerate(zip(self.items, value, strict=True))
        ]

    def decode(self, data: Any) -> Any:
        if not isinstance(data, list):
            raise _wrong_json("a JSON array", data)
        self._check_length(len(data))
        if self.item is not None:
            return tuple(_decode_items(self.item, data))
        assert self.items is not None
        return tuple(
            _decode_item(codec, index, item)
            for index, (codec, item) in enumerate(zip(self.items, data, strict=True))
        )

    def nested_dataclasses(self) -> Iterator[type[Any]]:
        for codec in (self.item,) if self.item is not None else self.items or ():
            yield from codec.nested_dataclasses()


def _encode_item(codec: _Codec, index: int, value: Any) -> Any:
    try:
        return codec.encode(value)
    except _Invalid as exc:
        raise exc.at(f"[{index}]") from None


def _decode_item(codec: _Codec, index: int, data: Any) -> Any:
    try:
        return codec.decode(data)
    except _Invalid as exc:
        raise exc.at(f"[{index}]") from None


def _encode_items(codec: _Codec, values: Any) -> list[Any]:
    return [_encode_item(codec, index, value) for index, value in enumerate(values)]


def _decode_items(codec: _Codec, data: list[Any]) -> list[Any]:
    return [_decode_item(codec, index, item) for index, item in enumerate(data)]


class _KeyCodec:
    """A dict key: JSON object keys are strings, so int-like keys are written as digits."""

    __slots__ = ("inner", "numeric")

    def __init__(self, inner: _Codec, numeric: bool) -> None:
        self.inner = inner
        self.numeric = numeric

    def encode(self, key: Any) -> str:
        encoded = self.inner.encode(key)
        return str(encoded) if self.numeric else typing.cast(str, encoded)

    def decode(self, text: Any) -> Any:
        if type(text) is not str:
            raise _wrong_json("a string object key", text)
        if not self.numeric:
            return self.inner.decode(text)
        try:
            number = int(text)
        except ValueError:
            raise _Invalid("object key is not an integer") from None
        if str(number) != text:  # only the form encode() writes: no "+1", "01" or " 1"
            raise _Invalid("object key is not a canonical integer")
        return self.inner.decode(number)


# A dict entry is named by its position, never by its key: keys are data too (an e-mail
# address, a customer id), and these messages end up in logs and the dead-letter column.
def _entry_place(position: int) -> str:
    return f"[entry {position}]"


def _key_place(position: int) -> str:
    return f"[key of entry {position}]"


class _DictCodec(_Codec):
    __slots__ = ("key", "value")

    def __init__(self, key: _KeyCodec, value: _Codec) -> None:
        self.key = key
        self.value = value

    def encode(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise _wrong_value("dict", value)
        encoded: dict[str, Any] = {}
        for position, (key, item) in enumerate(value.items()):
            try:
                text = self.key.encode(key)
            except _Invalid as exc:
                raise exc.at(_key_place(position)) from None
            try:
                encoded[text] = self.value.encode(item)
            except _Invalid as exc:
                raise exc.at(_entry_place(position)) from None
        return encoded

    def decode(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise _wrong_json("a JSON object", data)
        decoded: dict[Any, Any] = {}
        for position, (text, item) in enumerate(data.items()):
            try:
                key = self.key.decode(text)
            except _Invalid as exc:
                raise exc.at(_key_place(position)) from None
            try:
                decoded[key] = self.value.decode(item)
            except _Invalid as exc:
                raise exc.at(_entry_place(position)) from None
        return decoded

    def nested_dataclasses(self) -> Iterator[type[Any]]:
        return self.value.nested_dataclasses()


class _DataclassCodec(_Codec):
    """A nested dataclass; its fields are compiled on first use, so cycles are fine."""

    __slots__ = ("cls",)

    def __init__(self, cls: type[Any]) -> None:
        self.cls = cls

    def encode(self, value: Any) -> Any:
        # Exact class: a subclass instance would lose its extra fields and come back as
        # the base class.
        if type(value) is not self.cls:
            raise _wrong_value(_name(self.cls), value)
        encoded: dict[str, Any] = {}
        for field in _plan(self.cls):
            try:
                encoded[field.name] = field.codec.encode(getattr(value, field.name))
            except _Invalid as exc:
                raise exc.at(f".{field.name}") from None
        return encoded

    def decode(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise _wrong_json("a JSON object", data)
        kwargs: dict[str, Any] = {}
        for field in _plan(self.cls):
            if field.name in data:
                try:
                    kwargs[field.name] = field.codec.decode(data[field.name])
                except _Invalid as exc:
                    raise exc.at(f".{field.name}") from None
            elif field.required:
                raise _Invalid("required field is missing").at(f".{field.name}")
            # else: the dataclass applies its own default or default_factory
        return self.cls(**kwargs)

    def nested_dataclasses(self) -> Iterator[type[Any]]:
        yield self.cls


# --- compiling annotations ------------------------------------------------------------

_STR = _TextCodec()
_INT = _Exact(int, "integer")
_BOOL = _Exact(bool, "boolean")

_SCALARS: dict[object, _Codec] = {
    str: _STR,
    int: _INT,
    bool: _BOOL,
    float: _FloatCodec(),
    None: _NoneCodec(),
    _NONE_TYPE: _NoneCodec(),
    Decimal: _DecimalCodec(),
    UUID: _UUIDCodec(),
    datetime: _DateTimeCodec(),
    date: _DateCodec(),
}

_HINTS: dict[object, str] = {
    list: "a bare list has no item type; write list[T]",
    tuple: "a bare tuple has no item types; write tuple[T, ...]",
    dict: "a bare dict has no key and value types; write dict[K, V]",
    set: "sets have no JSON form with a stable order; use list[T] or tuple[T, ...]",
    frozenset: "sets have no JSON form with a stable order; use list[T] or tuple[T, ...]",
    bytes: "bytes have no JSON form; store text (e.g. base64) in a str field",
    typing.Any: "Any gives the codec no type to restore the value as",
    object: "object gives the codec no type to restore the value as",
}


def _compile(annotation: Any) -> _Codec:
    """Return the codec for one (resolved) annotation, or raise ``_Unsupported``."""
    try:
        scalar = _SCALARS.get(annotation)
    except TypeError:  # unhashable annotation objects are simply not scalars
        scalar = None
    if scalar is not None:
        return scalar
    if isinstance(annotation, typing.NewType):
        return _compile(annotation.__supertype__)
    if isinstance(annotation, type):
        if issubclass(annotation, Enum):
            return _EnumCodec(annotation)
        if dataclasses.is_dataclass(annotation):
            return _DataclassCodec(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list and len(args) == 1:
        return _ListCodec(_compile(args[0]))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _TupleCodec(_compile(args[0]), None)
        if Ellipsis not in args:
            return _TupleCodec(None, tuple(_compile(arg) for arg in args if arg != ()))
    if origin is dict and len(args) == 2:
        return _DictCodec(_compile_key(args[0]), _compile(args[1]))
    if origin is typing.Union or origin is types.UnionType:
        others = [arg for arg in args if arg is not _NONE_TYPE]
        if len(others) == 1:
            return _OptionalCodec(_compile(others[0]))
        raise _Unsupported(
            f"{_describe(annotation)} is a union of several types, which cannot be decoded "
            "unambiguously; only Optional[T] (T | None) is supported"
        )
    try:
        hint = _HINTS.get(annotation)
    except TypeError:
        hint = None
    raise _Unsupported(
        f"{_describe(annotation)}: {hint}"
        if hint
        else f"{_describe(annotation)} is not one of the supported types ({_SUPPORTED})"
    )


def _compile_key(annotation: Any) -> _KeyCodec:
    if isinstance(annotation, typing.NewType):
        return _compile_key(annotation.__supertype__)
    if annotation is str:
        return _KeyCodec(_STR, numeric=False)
    if annotation is int:
        return _KeyCodec(_INT, numeric=True)
    if annotation is UUID:
        return _KeyCodec(_SCALARS[UUID], numeric=False)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        codec = _EnumCodec(annotation)
        kinds = {type(member.value) for member in annotation.__members__.values()}
        if kinds <= {str}:
            return _KeyCodec(codec, numeric=False)
        if kinds == {int}:
            return _KeyCodec(codec, numeric=True)
        raise _Unsupported(
            f"dict key {_name(annotation)} mixes str and int values, which collide "
            "as JSON object keys"
        )
    raise _Unsupported(
        f"dict keys of type {_describe(annotation)} are not supported; JSON object keys are "
        "strings, so keys must be str, int, UUID or an Enum with str or int values"
    )


class _Field(NamedTuple):
    name: str
    codec: _Codec
    required: bool


_PLANS: dict[type[Any], tuple[_Field, ...]] = {}


def _plan(cls: type[Any]) -> tuple[_Field, ...]:
    """Return the compiled fields of dataclass *cls* (cached per class)."""
    plan = _PLANS.get(cls)
    if plan is None:
        # Concurrent first uses may both compile; the results are equal, so no lock.
        plan = _PLANS.setdefault(cls, _compile_plan(cls))
    return plan


def _compile_plan(cls: type[Any]) -> tuple[_Field, ...]:
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:
        raise TypeError(
            f"Cannot resolve the field annotations of {cls.__module__}.{cls.__qualname__}: "
            f"{type(exc).__name__}: {exc}. The payload codec evaluates string annotations "
            f"(`from __future__ import annotations`) in the globals of module "
            f"{cls.__module__!r}; define the class, and every type its fields name, at "
            "module level."
        ) from exc
    for name, hint in hints.items():
        if isinstance(hint, dataclasses.InitVar):
            raise TypeError(
                f"{cls.__name__}.{name}: InitVar pseudo-fields are not stored, so decode() "
                "could not pass them back to the constructor; use a regular field"
            )
    fields: list[_Field] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        annotation = hints[field.name]
        try:
            codec = _compile(annotation)
        except _Unsupported as exc:
            raise TypeError(
                f"{cls.__name__}.{field.name}: the annotation {_describe(annotation)} is not "
                f"supported by the payload codec: {exc.reason}"
            ) from None
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        fields.append(_Field(field.name, codec, required))
    return tuple(fields)


def _require_dataclass_type(cls: object, caller: str) -> type[Any]:
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{caller}() expects a dataclass class, got {_describe(cls)}")
    return cls


#: The codec of each dataclass that was encoded or decoded at the top level, so that a
#: call on a known class costs one dict lookup before its fields (its plan is ``_PLANS``').
_ROOTS: dict[type[Any], _DataclassCodec] = {}


def _root(cls: type[Any]) -> _DataclassCodec:
    # Concurrent first uses may both build one; they are equal, so no lock.
    return _ROOTS.setdefault(cls, _DataclassCodec(cls))


# --- public API -----------------------------------------------------------------------


def check_dataclass(cls: type) -> None:
    """Raise ``TypeError`` unless every field of *cls* (recursively) can round-trip.

    Called when an event class is declared, so that a field the codec cannot store is an
    import-time error rather than a failure when a timer fires days later. Nested
    dataclasses are checked too; self-referential classes are visited once.
    """
    pending = [_require_dataclass_type(cls, "check_dataclass")]
    seen: set[type[Any]] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for field in _plan(current):
            pending.extend(field.codec.nested_dataclasses())


def encode(obj: Any) -> dict[str, Any]:
    """Return the JSON object for dataclass instance *obj*, validating every field.

    The result holds only ``dict``, ``list``, ``str``, ``int``, finite ``float``, ``bool``
    and ``None``, so ``json.dumps(..., allow_nan=False)`` accepts it. A value that does not
    match its annotation raises ``TypeError`` naming the field path and the offending type,
    e.g. ``Order.lines[2].price: expected Decimal, got float``.
    """
    cls = type(obj)
    root = _ROOTS.get(cls)
    if root is None:
        if isinstance(obj, type) or not dataclasses.is_dataclass(obj):
            raise TypeError(f"encode() expects a dataclass instance, got {_describe(cls)}")
        root = _root(cls)
    try:
        encoded: dict[str, Any] = root.encode(obj)
    except _Invalid as exc:
        raise TypeError(f"Cannot encode {cls.__name__}: {exc.where(cls)}: {exc.message}") from None
    return encoded


def decode(cls: type[T], data: Mapping[str, Any]) -> T:
    """Return the *cls* instance that ``encode()`` stored as *data*.

    Keys that are not fields of *cls* are ignored (rows written by a newer release), and
    missing fields take their defaults. A missing required field or a JSON value of the
    wrong kind raises ``ValueError`` naming the field path; an unsupported annotation on
    *cls* raises ``TypeError``.
    """
    try:
        root = _ROOTS.get(cls)
    except TypeError:  # an unhashable "class": refused by name below
        root = None
    if root is None:
        root = _root(_require_dataclass_type(cls, "decode"))
    klass = root.cls
    try:
        decoded: T = root.decode(data)
    except _Invalid as exc:
        raise ValueError(
            f"Cannot decode {klass.__name__}: {exc.where(klass)}: {exc.message}"
        ) from None
    return decoded
