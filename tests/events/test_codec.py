"""The payload codec round-trips supported dataclasses exactly and refuses everything else.

Pure Python: no database, no Django setup. The classes below are declared at module level
under ``from __future__ import annotations``, as users' event classes are.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum, IntEnum, StrEnum
from typing import Any, NewType, Optional, Union
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bsft_saga.events.codec import check_dataclass, decode, encode

# --- the classes under test -------------------------------------------------------------


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Priority(IntEnum):
    LOW = 1
    HIGH = 2


class Region(StrEnum):
    EU = "eu"
    US = "us"


class Level(Enum):
    ONE = 1
    TWO = 2


CustomerId = NewType("CustomerId", str)


@dataclass(frozen=True)
class Scalars:
    text: str
    number: int
    real: float
    flag: bool
    nothing: None
    amount: Decimal
    ident: UUID
    moment: datetime
    day: date
    color: Color
    priority: Priority
    customer: CustomerId


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int
    price: Decimal
    discount: float | None = None


@dataclass(frozen=True)
class Order:
    order_id: UUID
    lines: list[Line]
    totals: dict[str, Decimal]
    by_region: dict[Region, list[int]]
    by_id: dict[UUID, Optional[Line]]  # noqa: UP045 - both spellings are supported
    by_count: dict[int, float]
    by_level: dict[Level, str]
    tags: tuple[str, ...]
    pair: tuple[int, date]
    placed_at: datetime
    note: Optional[str] = None  # noqa: UP045
    history: list[dict[str, list[date]]] = field(default_factory=list)


@dataclass(frozen=True)
class Node:
    label: str
    children: tuple[Node, ...] = ()


@dataclass(frozen=True)
class Wrapper:
    order: Order
    maybe: Line | None
    tree: Node


@dataclass(frozen=True)
class WithDefaults:
    name: str
    count: int = 3
    items: list[int] = field(default_factory=list)
    line: Line | None = None


@dataclass(frozen=True)
class JustFloat:
    value: float


@dataclass(frozen=True)
class JustInt:
    value: int


@dataclass(frozen=True)
class JustBool:
    value: bool


@dataclass(frozen=True)
class JustStr:
    value: str


@dataclass(frozen=True)
class JustDate:
    value: date


@dataclass(frozen=True)
class JustDecimal:
    value: Decimal


@dataclass(frozen=True)
class CountsByInt:
    value: dict[int, str]


@dataclass
class Derived:
    base: int
    double: int = field(init=False)

    def __post_init__(self) -> None:
        self.double = self.base * 2


@dataclass(frozen=True)
class HasUnsupportedNested:
    inner: HasSet


@dataclass(frozen=True)
class HasSet:
    values: set[int]


# --- comparing values exactly -----------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Compare stricter than ``==``: types, float signs and NaN, Decimal exponents, offsets.

    ``==`` is not enough: ``Decimal("1.0") == Decimal("1.00")``, ``0.0 == -0.0``,
    ``nan != nan``, ``1 == True``, and a ``Decimal("sNaN")`` comparison raises. Aware
    datetimes are compared by wall time and UTC offset (which together fix the instant):
    PEP 495 makes ``==`` False across zones for times in a fold or gap.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, Decimal):
        return str(a) == str(b)
    if isinstance(a, datetime):
        wall_time_equal: bool = a.replace(tzinfo=None) == b.replace(tzinfo=None)
        return wall_time_equal and a.utcoffset() == b.utcoffset()
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return sorted(map(repr, a)) == sorted(map(repr, b)) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def through_json(obj: Any) -> Any:
    """Encode, serialise strictly (no NaN/Infinity literals), parse and decode."""
    wire = json.dumps(encode(obj), allow_nan=False)
    return decode(type(obj), json.loads(wire))


def assert_plain_json(value: Any) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str
            assert_plain_json(item)
    elif isinstance(value, list):
        for item in value:
            assert_plain_json(item)
    elif isinstance(value, float):
        assert math.isfinite(value)
        assert math.copysign(1.0, value) > 0 or value != 0.0
    else:
        assert value is None or type(value) in (str, int, bool)


# --- strategies -------------------------------------------------------------------------

fixed_offsets = st.builds(
    timezone,
    st.timedeltas(
        min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
    ),
)
datetimes = st.datetimes(timezones=st.none() | st.just(UTC) | fixed_offsets | st.timezones())
exponent_decimals = st.builds(
    lambda sign, digits, exponent: Decimal((sign, digits, exponent)),
    st.integers(0, 1),
    st.tuples(st.integers(0, 9)) | st.lists(st.integers(0, 9), min_size=1, max_size=30).map(tuple),
    st.integers(-40, 40),
)
decimals = st.decimals(allow_nan=True, allow_infinity=True) | exponent_decimals
# Every storable str: any code point but NUL and the surrogates (refused, see below).
text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=20)

scalars = st.builds(
    Scalars,
    text=text,
    number=st.integers(),
    real=st.floats(),
    flag=st.booleans(),
    nothing=st.none(),
    amount=decimals,
    ident=st.uuids(),
    moment=datetimes,
    day=st.dates(),
    color=st.sampled_from(Color),
    priority=st.sampled_from(Priority),
    customer=text.map(CustomerId),
)
lines = st.builds(
    Line,
    sku=text,
    quantity=st.integers(),
    price=decimals,
    discount=st.none() | st.floats(),
)
orders = st.builds(
    Order,
    order_id=st.uuids(),
    lines=st.lists(lines, max_size=3),
    totals=st.dictionaries(text, decimals, max_size=3),
    by_region=st.dictionaries(st.sampled_from(Region), st.lists(st.integers(), max_size=3)),
    by_id=st.dictionaries(st.uuids(), st.none() | lines, max_size=3),
    by_count=st.dictionaries(st.integers(), st.floats(), max_size=3),
    by_level=st.dictionaries(st.sampled_from(Level), text),
    tags=st.lists(text, max_size=3).map(tuple),
    pair=st.tuples(st.integers(), st.dates()),
    placed_at=datetimes,
    note=st.none() | text,
    history=st.lists(
        st.dictionaries(text, st.lists(st.dates(), max_size=2), max_size=2), max_size=2
    ),
)
nodes = st.recursive(
    st.builds(Node, label=text),
    lambda children: st.builds(
        Node, label=text, children=st.lists(children, max_size=3).map(tuple)
    ),
    max_leaves=10,
)
wrappers = st.builds(Wrapper, order=orders, maybe=st.none() | lines, tree=nodes)

big = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --- round trips ------------------------------------------------------------------------


@given(scalars)
def test_every_scalar_type_round_trips_exactly(value: Scalars) -> None:
    assert same(through_json(value), value)


@big
@given(wrappers)
def test_nested_dataclasses_with_containers_round_trip_exactly(value: Wrapper) -> None:
    assert same(through_json(value), value)


@big
@given(wrappers)
def test_encoded_payload_holds_only_plain_json_values(value: Wrapper) -> None:
    assert_plain_json(encode(value))


@given(st.floats())
def test_any_float_round_trips_including_nan_infinities_and_signed_zero(value: float) -> None:
    assert same(through_json(JustFloat(value)).value, value)


@given(datetimes)
def test_datetime_keeps_wall_time_microseconds_and_utc_offset(value: datetime) -> None:
    decoded = through_json(Scalars_with(moment=value)).moment
    assert decoded.replace(tzinfo=None) == value.replace(tzinfo=None)
    assert decoded.utcoffset() == value.utcoffset()
    if value.tzinfo is not None:
        assert decoded.astimezone(UTC) == value.astimezone(UTC)


def Scalars_with(**changes: Any) -> Scalars:
    base = Scalars(
        text="t",
        number=1,
        real=1.5,
        flag=True,
        nothing=None,
        amount=Decimal("1.00"),
        ident=UUID(int=1),
        moment=datetime(2024, 3, 31, 2, 30, tzinfo=UTC),
        day=date(2024, 3, 31),
        color=Color.RED,
        priority=Priority.HIGH,
        customer=CustomerId("c-1"),
    )
    return dataclasses.replace(base, **changes)


@given(nodes)
def test_self_referential_dataclass_round_trips(value: Node) -> None:
    assert through_json(value) == value


# --- the wire format --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "wire"),
    [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"), (-0.0, "-0.0")],
)
def test_floats_json_cannot_hold_are_written_as_strings(value: float, wire: str) -> None:
    assert encode(JustFloat(value)) == {"value": wire}


def test_ordinary_floats_are_json_numbers() -> None:
    assert encode(JustFloat(0.1)) == {"value": 0.1}
    assert math.copysign(1.0, encode(JustFloat(0.0))["value"]) == 1.0


def test_float_field_accepts_an_int_and_decodes_a_float() -> None:
    encoded = encode(JustFloat(3))  # an int is a valid float (PEP 484)
    assert encoded == {"value": 3.0}
    assert type(decode(JustFloat, encoded).value) is float


def test_float_field_accepts_a_json_integer_as_jsonb_prints_large_floats() -> None:
    assert same(decode(JustFloat, {"value": 100000000000000000000}).value, 1e20)


@pytest.mark.parametrize("text", ["1.00", "1E+2", "-0", "0E-7", "NaN", "-sNaN", "-Infinity"])
def test_decimal_keeps_its_exact_form(text: str) -> None:
    assert encode(JustDecimal(Decimal(text))) == {"value": text}
    assert str(decode(JustDecimal, {"value": text}).value) == text


def test_datetime_is_written_in_isoformat_with_microseconds_and_offset() -> None:
    moment = datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert encode(Scalars_with(moment=moment))["moment"] == "2024-01-02T03:04:05.000006+05:30"


def test_datetime_subclasses_are_accepted_and_read_back_as_datetime() -> None:
    class FakeDatetime(datetime):  # what freezegun's clock returns
        pass

    moment = FakeDatetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    decoded = through_json(Scalars_with(moment=moment)).moment
    assert type(decoded) is datetime
    assert decoded == moment


def test_enum_is_written_as_its_value() -> None:
    encoded = encode(Scalars_with(color=Color.GREEN, priority=Priority.LOW))
    assert (encoded["color"], encoded["priority"]) == ("green", 1)


def test_dict_keys_are_written_as_strings_and_read_back_typed() -> None:
    encoded = encode(CountsByInt({-3: "a", 10: "b"}))
    assert encoded == {"value": {"-3": "a", "10": "b"}}
    assert decode(CountsByInt, encoded) == CountsByInt({-3: "a", 10: "b"})


def test_init_false_fields_are_neither_written_nor_read() -> None:
    assert encode(Derived(4)) == {"base": 4}
    assert decode(Derived, {"base": 4, "double": 99}).double == 8


# --- decoding: defaults and forward compatibility ---------------------------------------


def test_unknown_keys_are_ignored() -> None:
    assert decode(WithDefaults, {"name": "n", "added_in_v2": [1, 2]}) == WithDefaults("n")


def test_missing_fields_take_their_defaults_and_fresh_factory_values() -> None:
    first = decode(WithDefaults, {"name": "n"})
    second = decode(WithDefaults, {"name": "n"})
    assert first == WithDefaults(name="n", count=3, items=[], line=None)
    assert first.items is not second.items


def test_missing_required_field_is_a_value_error_naming_the_path() -> None:
    data = encode(WithDefaults("n", line=Line("s", 1, Decimal(1))))
    del data["line"]["sku"]
    with pytest.raises(ValueError, match=r"WithDefaults\.line\.sku: required field is missing"):
        decode(WithDefaults, data)


@pytest.mark.parametrize(
    ("cls", "data", "path"),
    [
        (JustDecimal, {"value": 1.5}, r"JustDecimal\.value: .*got JSON number"),
        (JustInt, {"value": True}, r"JustInt\.value: .*got JSON boolean"),
        (JustInt, {"value": 1.0}, r"JustInt\.value: .*got JSON number"),
        (JustBool, {"value": 1}, r"JustBool\.value: .*got JSON number"),
        (JustStr, {"value": None}, r"JustStr\.value: .*got JSON null"),
        (JustFloat, {"value": "1.5"}, r"JustFloat\.value"),
        (JustDate, {"value": "2024-01-02T00:00:00"}, r"JustDate\.value: .*ISO 8601 date"),
        (CountsByInt, {"value": {"01": "a"}}, r"CountsByInt\.value\[key of entry 0\]: .*canon"),
        (CountsByInt, {"value": {"7": "a", "x": "a"}}, r"CountsByInt\.value\[key of entry 1\]"),
        (CountsByInt, {"value": []}, r"CountsByInt\.value: .*got JSON array"),
    ],
)
def test_wrong_json_is_a_value_error_naming_the_path(
    cls: type[Any], data: dict[str, Any], path: str
) -> None:
    with pytest.raises(ValueError, match=rf"^Cannot decode {cls.__name__}: {path}"):
        decode(cls, data)


def test_invalid_strings_are_value_errors() -> None:
    data = encode(Scalars_with())
    for name, bad in [("ident", "nope"), ("amount", "1,5"), ("moment", "yesterday")]:
        with pytest.raises(ValueError, match=rf"Scalars\.{name}: "):
            decode(Scalars, {**data, name: bad})


def test_unknown_enum_value_is_a_value_error() -> None:
    data = {**encode(Scalars_with()), "color": "blue"}
    with pytest.raises(ValueError, match=r"Scalars\.color: value is not a member of Color"):
        decode(Scalars, data)


def test_decoding_a_non_object_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="got JSON array"):
        decode(JustInt, [])  # type: ignore[arg-type]


# --- encoding: values must match their annotations --------------------------------------


def test_wrong_value_is_a_type_error_naming_class_path_and_type() -> None:
    order = Order_with(
        lines=[Line("a", 1, Decimal(1)), Line("b", 1, Decimal(1)), Line("c", 1, 1.5)]  # type: ignore[arg-type]
    )
    with pytest.raises(
        TypeError,
        match=r"^Cannot encode Order: Order\.lines\[2\]\.price: expected Decimal, got float$",
    ):
        encode(order)


def test_wrong_dict_value_names_its_entry_by_position_not_by_key() -> None:
    order = Order_with(totals={"EUR": Decimal(1), "alice@example.com": "2"})
    with pytest.raises(TypeError) as raised:
        encode(order)

    assert str(raised.value).endswith("Order.totals[entry 1]: expected Decimal, got str")
    assert "alice" not in str(raised.value)


def test_wrong_dict_key_names_its_entry_by_position_not_by_key() -> None:
    order = Order_with(by_region={Region.EU: [1], "alice@example.com": [2]})
    with pytest.raises(TypeError) as raised:
        encode(order)

    assert str(raised.value).endswith("Order.by_region[key of entry 1]: expected Region, got str")
    assert "alice" not in str(raised.value)


def test_a_decode_error_inside_a_dict_does_not_quote_the_key() -> None:
    data = encode(Order_with(totals={"alice@example.com": Decimal(1)}))
    data["totals"]["alice@example.com"] = 1.5

    with pytest.raises(ValueError, match=r"Order\.totals\[entry 0\]: ") as raised:
        decode(Order, data)

    assert "alice" not in str(raised.value)


def Order_with(**changes: Any) -> Order:
    base = Order(
        order_id=UUID(int=7),
        lines=[],
        totals={},
        by_region={},
        by_id={},
        by_count={},
        by_level={},
        tags=(),
        pair=(1, date(2024, 1, 1)),
        placed_at=datetime(2024, 1, 1, tzinfo=UTC),
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (JustInt(True), "expected int, got bool"),
        (JustInt(Priority.LOW), "expected int, got Priority"),
        (JustBool(1), "expected bool, got int"),  # type: ignore[arg-type]
        (JustFloat(True), "expected float, got bool"),
        (JustStr(Region.EU), "expected str, got Region"),
        (JustDate(datetime(2024, 1, 1)), "expected date, got datetime"),
        (JustDecimal(1.5), "expected Decimal, got float"),  # type: ignore[arg-type]
        (Scalars_with(nothing=0), "Scalars.nothing: expected None, got int"),
        (Scalars_with(color=Region.EU), "Scalars.color: expected Color, got Region"),
        (Order_with(tags=["a"]), "Order.tags: expected tuple, got list"),
        (Order_with(lines=(Line("a", 1, Decimal(1)),)), "Order.lines: expected list, got tuple"),
        (Order_with(pair=(1,)), "Order.pair: expected 2 items, got 1"),
        (Order_with(placed_at=date(2024, 1, 1)), "expected datetime, got date"),
        (JustFloat(10**400), "too large"),
    ],
)
def test_value_of_the_wrong_type_is_a_type_error(obj: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message.replace("[", r"\[").replace(".", r"\.")):
        encode(obj)


@pytest.mark.parametrize(
    "bad",
    ["\x00", "before\x00after", "caf\u00e9\x00", "\ud800", "lone \udfff tail", "pair \ud83d half"],
    ids=["nul", "nul-inside", "nul-in-non-ascii", "high-surrogate", "low-surrogate", "half-pair"],
)
def test_a_str_postgresql_cannot_store_is_a_type_error_on_every_backend(bad: str) -> None:
    with pytest.raises(TypeError, match=r"^Cannot encode JustStr: JustStr\.value: str holds a NUL"):
        encode(JustStr(bad))


def test_unstorable_text_is_found_in_dict_keys_and_nested_fields_and_not_quoted() -> None:
    with pytest.raises(TypeError) as in_key:
        encode(Order_with(totals={"secret\x00": Decimal(1)}))
    with pytest.raises(TypeError, match=r"Order\.lines\[0\]\.sku: str holds"):
        encode(Order_with(lines=[Line("secret\ud800", 1, Decimal(1))]))

    assert str(in_key.value).endswith("Order.totals[key of entry 0]: " + _UNSTORABLE_ASCII)
    assert "secret" not in str(in_key.value)


_UNSTORABLE_ASCII = "str holds a NUL character, which PostgreSQL cannot store"


def test_text_with_every_other_character_round_trips() -> None:
    value = "tab\t newline\n \x01 \x7f \u00e9 \u20ac \U0001f600 \ufffd"
    assert decode(JustStr, encode(JustStr(value))) == JustStr(value)


@pytest.mark.parametrize("number", [2**53, -(2**53), 2**53 - 1, 0])
def test_an_int_a_float_holds_exactly_is_accepted_in_a_float_field(number: int) -> None:
    assert decode(JustFloat, encode(JustFloat(number))) == JustFloat(float(number))


@pytest.mark.parametrize("number", [2**53 + 1, -(2**53) - 1, 10**20])
def test_an_int_above_2_53_in_a_float_field_is_a_type_error(number: int) -> None:
    with pytest.raises(TypeError, match=r"JustFloat\.value: int value is too large .*2\*\*53"):
        encode(JustFloat(number))


def test_subclass_of_a_nested_dataclass_is_refused() -> None:
    @dataclass(frozen=True)
    class SpecialLine(Line):
        extra: int = 0

    with pytest.raises(TypeError, match=r"Order\.lines\[0\]: expected Line, got SpecialLine"):
        encode(Order_with(lines=[SpecialLine("a", 1, Decimal(1))]))


@pytest.mark.parametrize("obj", [Line, 3, {"sku": "a"}, None])
def test_encode_requires_a_dataclass_instance(obj: Any) -> None:
    with pytest.raises(TypeError, match="expects a dataclass instance"):
        encode(obj)


def test_decode_requires_a_dataclass_class() -> None:
    with pytest.raises(TypeError, match="expects a dataclass class"):
        decode(dict, {})


# --- declaration-time checks ------------------------------------------------------------


class Plain:
    pass


class FloatValued(Enum):
    HALF = 0.5


class Mixed(Enum):
    A = "a"
    B = 1


@pytest.mark.parametrize(
    ("annotation", "shown"),
    [
        (set[int], "set[int]"),
        (Any, "Any"),
        (bytes, "bytes"),
        (Plain, "Plain"),
        (Union[int, str], "int | str"),  # noqa: UP007
        (int | str, "int | str"),
        (list, "list"),
        (list[Any], "list[Any]"),
        (dict[float, int], "dict[float, int]"),
        (dict[Mixed, int], "dict[Mixed, int]"),
        (FloatValued, "FloatValued"),
        (tuple[int, ...] | list[int], "tuple[int, ...] | list[int]"),
    ],
)
def test_unsupported_annotation_is_a_type_error_naming_class_field_and_annotation(
    annotation: Any, shown: str
) -> None:
    cls = dataclasses.make_dataclass("Bad", [("field_name", annotation)])
    with pytest.raises(TypeError, match=r"^Bad\.field_name: the annotation ") as excinfo:
        check_dataclass(cls)
    assert shown in str(excinfo.value)
    with pytest.raises(TypeError, match=r"Bad\.field_name"):
        encode(cls(None))


def test_check_dataclass_accepts_every_supported_annotation() -> None:
    for cls in (Scalars, Line, Order, Node, Wrapper, WithDefaults, Derived):
        check_dataclass(cls)


def test_check_dataclass_recurses_into_nested_dataclasses() -> None:
    with pytest.raises(TypeError, match=r"HasSet\.values: the annotation set\[int\]"):
        check_dataclass(HasUnsupportedNested)


@pytest.mark.parametrize("obj", [Plain, int, Line("a", 1, Decimal(1))])
def test_check_dataclass_rejects_anything_but_a_dataclass_class(obj: Any) -> None:
    with pytest.raises(TypeError, match="expects a dataclass class"):
        check_dataclass(obj)


def test_initvar_is_refused() -> None:
    cls = dataclasses.make_dataclass("WithInit", [("seed", dataclasses.InitVar[int])])
    with pytest.raises(TypeError, match=r"WithInit\.seed: InitVar"):
        check_dataclass(cls)


def test_local_class_with_unresolvable_string_annotation_is_a_helpful_type_error() -> None:
    class Local:
        pass

    @dataclass(frozen=True)
    class UsesLocal:
        thing: Local

    with pytest.raises(TypeError, match=r"UsesLocal.*NameError.*module level"):
        check_dataclass(UsesLocal)


def test_local_class_naming_only_module_level_types_works() -> None:
    @dataclass(frozen=True)
    class LocalEvent:
        line: Line
        at: datetime

    value = LocalEvent(Line("a", 1, Decimal("2.50")), datetime(2024, 1, 1, tzinfo=UTC))
    assert through_json(value) == value
