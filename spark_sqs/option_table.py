"""The engine behind every option map: a declarative table parsed, checked and rendered.
Runs on: driver and executors.

An ``OptionTable`` is one direction's accepted options (the source's in ``spark_sqs.options``,
the sink's in ``spark_sqs.sink.options``; both start from the connection's rows in
``spark_sqs.connection``) and the side it belongs to, which every error names ("SQS source
option", "SQS sink option"). ``OptionTable.parse`` turns a case-insensitive option map into
field values: each row's kind, range, choices, ``requires`` and ``excludes`` drive a generic
pass, then the table's validators (rules between options that are more than "needs" or
"excludes") run in order and add the fields they derive. ``build`` makes a frozen dataclass of
those fields, so one table parsed once gives both the options object and its connection part.
``render_markdown`` turns a table into the rows of a docs table.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from .errors import InvalidOptionError

# How a value is read. "list" values stay text for their validator to split.
KINDS = ("str", "int", "seconds", "bytes", "bool", "choice", "url", "queueUrl", "list")

# The shape a value of a kind must have: (pattern, what it is for "is not ...").
_KIND_SHAPES: dict[str, tuple[str | None, str]] = {
    "url": (r"https?://[^/\s]+.*", "an http(s) URL"),
    "queueUrl": (r"https?://[^/\s]+/.+", "a queue URL"),
}


@dataclass(frozen=True)
class OptionSpec:
    """One accepted option.

    ``requires``/``excludes`` entries are ``"option"`` (that option is given) or
    ``"option=value"`` (it has that value, given or by default), optionally followed by
    ``" because <why>"`` for the error. They apply only while this option is in use: given with
    a value other than its default.
    """

    name: str
    default: str | None
    doc: str
    kind: str = "str"
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    # For "str" kinds: a regular expression the whole value must match, what such a value is
    # ("a 12-digit AWS account id") and an example for the fix. For "list": what it lists.
    pattern: str | None = None
    shape: str = ""
    example: str = ""
    # Never shown in an error (the value) nor in a repr.
    secret: bool = False
    # The default is computed from other options by a validator (``default`` only documents it).
    derived: bool = False
    # Other spellings accepted for it (other sources' names); giving two of them is an error.
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: unknown kind {self.kind!r}")


@dataclass(frozen=True)
class Check:
    """What a validator sees: the table, the value of every option after the generic pass
    (given or default, of its kind; None when it has neither) and the environment."""

    table: OptionTable
    values: Mapping[str, Any]
    env: Mapping[str, str]

    @property
    def side(self) -> str:
        return self.table.side

    def invalid(self, key: str, value: object, problem: str, fix: str) -> InvalidOptionError:
        """The error for ``key`` = ``value`` (secrets are not shown)."""
        return InvalidOptionError.for_option(key, value, problem, fix, side=self.side)

    def missing(self, key: str, text: str) -> InvalidOptionError:
        """The error for a required ``key`` that was not given; ``text`` says why and the fix."""
        return InvalidOptionError(f"Missing SQS {self.side} option '{key}': {text}")

    def convert(self, name: str, text: str) -> Any:
        """``text`` read as option ``name`` reads a given value (for defaults found elsewhere)."""
        return convert(self.table.spec(name), text, side=self.side)


Validator = Callable[[Check], dict[str, Any]]


@dataclass(frozen=True)
class OptionTable:
    """One direction's accepted options, in the docs' order.

    ``validators`` run in this order after the generic pass (the first failing one names its
    option); each returns the fields it derives. ``misplaced`` maps a lower-case key that
    belongs elsewhere to the hint its error gives (a close-match suggestion would mislead
    there); ``passed`` holds lower-case keys Spark itself adds, which are ignored.
    """

    side: str
    specs: tuple[OptionSpec, ...]
    validators: tuple[Validator, ...] = ()
    misplaced: Mapping[str, str] = field(default_factory=dict)
    passed: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        names = [spec.name for spec in self.specs]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.side} options: an option is listed twice in {names}")
        for spec in self.specs:
            for entry in (*spec.requires, *spec.excludes):
                if _rule(entry)[0] not in names:
                    raise ValueError(f"option {spec.name}: {entry!r} names no {self.side} option")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.specs)

    def spec(self, name: str) -> OptionSpec:
        return next(spec for spec in self.specs if spec.name == name)

    def parse(self, options: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        """The field values of ``options``: every option's value under its field name
        (``queueOwnerAccountId`` -> ``queue_owner_account_id``), then what the validators
        derive. Raises ``InvalidOptionError`` naming the option, the value and the fix."""
        given = self._normalise_keys(options)
        values = {spec.name: _value(spec, given, self.side) for spec in self.specs}
        self._check_rules(given, values)
        fields = {field_name(name): value for name, value in values.items()}
        check = Check(self, values, env)
        for validator in self.validators:
            fields.update(validator(check))
        return fields

    # -- keys ------------------------------------------------------------------------------------

    def _normalise_keys(self, options: Mapping[str, Any]) -> dict[str, str]:
        canonical = {
            key.lower(): spec.name for spec in self.specs for key in (spec.name, *spec.aliases)
        }
        out: dict[str, str] = {}
        for key, value in options.items():
            lowered = str(key).lower()
            if lowered in self.passed:
                continue
            name = canonical.get(lowered)
            if name is None:
                close = difflib.get_close_matches(lowered, list(canonical), n=1)
                hint = self.misplaced.get(lowered) or (
                    f"did you mean '{canonical[close[0]]}'?" if close else "see the option table"
                )
                raise InvalidOptionError(
                    f"Unknown SQS {self.side} option '{key}'. Fix: remove it or correct the "
                    f"name; {hint} Accepted options: {', '.join(self.names)}"
                )
            if name in out:
                spellings = " and ".join(
                    f"'{k}'" for k in options if canonical.get(str(k).lower()) == name
                )
                raise InvalidOptionError(
                    f"SQS {self.side} option '{name}' is given twice, as {spellings}. Fix: give "
                    "one of these spellings"
                )
            out[name] = "" if value is None else str(value)
        return out

    # -- requires / excludes ---------------------------------------------------------------------

    def _in_use(self, name: str, given: Mapping[str, str], values: Mapping[str, Any]) -> bool:
        """Given, with a value other than the default: an option at its default never
        conflicts."""
        spec = self.spec(name)
        if name not in given or values[name] is None:
            return False
        return (
            spec.default is None
            or spec.derived
            or values[name] != convert(spec, spec.default, side=self.side)
        )

    def _holds(
        self, option: str, value: str | None, given: Mapping[str, str], values: Mapping[str, Any]
    ) -> bool:
        if value is None:
            return self._in_use(option, given, values)
        return values[option] == convert(self.spec(option), value, side=self.side)

    def _fail(self, spec: OptionSpec, given: Mapping[str, str], problem: str, fix: str) -> NoReturn:
        # The value is shown unless it is a secret (then not even as <redacted>: nothing to fix
        # in it).
        shown = "" if spec.secret else f" = {given[spec.name].strip()!r}"
        raise InvalidOptionError(
            f"Invalid SQS {self.side} option '{spec.name}'{shown}: {problem}. Fix: {fix}"
        )

    def _check_rules(self, given: Mapping[str, str], values: Mapping[str, Any]) -> None:
        for spec in self.specs:
            if not self._in_use(spec.name, given, values):
                continue
            for entry in spec.requires:
                option, value, why = _rule(entry)
                if self._holds(option, value, given, values):
                    continue
                because = f": {why}" if why else ""
                if value is not None:
                    here = _shown(values[option])
                    self._fail(
                        spec,
                        given,
                        f"it only applies with {option}={value} (here {here}){because}",
                        f"add .option('{option}', '{value}') or remove '{spec.name}'",
                    )
                instead = self._alternatives(option, given, values)
                if instead:
                    self._fail(
                        spec,
                        given,
                        f"it only applies together with '{option}', not with '{instead}'{because}",
                        f"remove it, or give '{option}' instead of '{instead}'",
                    )
                self._fail(
                    spec,
                    given,
                    f"it only applies with '{option}'{because}",
                    f"set '{option}' or remove '{spec.name}'",
                )
            for entry in spec.excludes:
                option, value, why = _rule(entry)
                if not self._holds(option, value, given, values):
                    continue
                other = f"{option}={value}" if value is not None else f"'{option}'"
                because = f": {why}" if why else ""
                self._fail(
                    spec,
                    given,
                    f"conflicts with {other}{because}",
                    f"set either '{spec.name}' or {other}, not both",
                )

    def _alternatives(
        self, option: str, given: Mapping[str, str], values: Mapping[str, Any]
    ) -> str | None:
        """A given option that stands in place of ``option`` (the two exclude each other)."""
        rivals = [_rule(e)[0] for e in self.spec(option).excludes]
        rivals += [s.name for s in self.specs if option in (_rule(e)[0] for e in s.excludes)]
        return next((r for r in rivals if self._in_use(r, given, values)), None)


T = TypeVar("T")


def build(cls: type[T], fields: Mapping[str, Any]) -> T:
    """The frozen dataclass ``cls`` from those of ``fields`` it has (the rest are other parts'
    fields, or options a validator turned into another field)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{name: value for name, value in fields.items() if name in names})


def field_name(option: str) -> str:
    """``queueOwnerAccountId`` -> ``queue_owner_account_id`` (the options object's field)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", option).lower()


# -- the generic pass: one value per option, from the table --------------------------------------


def _value(spec: OptionSpec, given: Mapping[str, str], side: str) -> Any:
    """The option's value of its kind: given, else its default; None when it has neither."""
    text = given.get(spec.name)
    if spec.kind in ("str", "url", "queueUrl", "list"):
        text = (text or "").strip() or None  # blank means not given
    if text is None:
        if spec.default is None or spec.derived:
            return None
        text = spec.default
    return convert(spec, text, side=side)


def convert(spec: OptionSpec, text: str, *, side: str) -> Any:
    """``text`` as a value of ``spec``'s kind; ``InvalidOptionError`` naming the option of that
    ``side``."""
    name, text = spec.name, text.strip()
    if spec.kind == "int":
        return _to_int(name, text, int(spec.low or 0), int(spec.high or 0), side)
    if spec.kind == "seconds":
        return _to_seconds(name, text, float(spec.low or 0), float(spec.high or 0), side)
    if spec.kind == "bytes":
        return _to_bytes(name, text, int(spec.low or 0), int(spec.high or 0), side)
    if spec.kind == "bool":
        return _to_bool(name, text, side)
    if spec.kind == "choice":
        for choice in spec.choices:
            if choice.lower() == text.lower():
                return choice
        raise InvalidOptionError.for_option(
            name,
            text,
            "is not " + " or ".join(f"'{c}'" for c in spec.choices),
            "use "
            + " or ".join(
                f"'{c}'" + (" (the default)" if c == spec.default else "") for c in spec.choices
            ),
            side=side,
        )
    pattern, shape = _KIND_SHAPES.get(spec.kind, (spec.pattern, spec.shape))
    if pattern is not None and not re.fullmatch(pattern, text):
        example = f" such as {spec.example}" if spec.example else ""
        raise InvalidOptionError.for_option(
            name, text, f"is not {shape}", f"give {shape}{example}", side=side
        )
    return text


def _to_int(name: str, text: str, low: int, high: int, side: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidOptionError.for_option(
            name, text, "is not a whole number", f"give an integer from {low} to {high}", side=side
        ) from None
    if not low <= value <= high:
        raise InvalidOptionError.for_option(
            name,
            text,
            f"is out of range {low}-{high}",
            f"give an integer from {low} to {high}",
            side=side,
        )
    return value


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def _to_seconds(name: str, text: str, low: float, high: float, side: str) -> float:
    bounds = f"from {_number(low)} to {_number(high)}"
    try:
        value = float(text)
    except ValueError:
        raise InvalidOptionError.for_option(
            name, text, "is not a number of seconds", f"give a number {bounds}", side=side
        ) from None
    if math.isnan(value) or not low <= value <= high:
        raise InvalidOptionError.for_option(
            name,
            text,
            f"is out of range {_number(low)}-{_number(high)}",
            f"give a number {bounds}",
            side=side,
        )
    return value


# Byte sizes as Spark writes them (spark.executor.memory, Auto Loader's maxBytesPerTrigger):
# binary multiples, the unit's "b"/"ib" optional, any case.
_BYTE_UNITS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}
_BYTE_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def byte_size_text(value: int) -> str:
    """``value`` bytes as the largest exact unit: ``64m``, ``1g``, ``1536k``."""
    for unit in ("t", "g", "m", "k"):
        shift = _BYTE_UNITS[unit]
        if value and value % (1 << shift) == 0:
            return f"{value >> shift}{unit}"
    return str(value)


def _to_bytes(name: str, text: str, low: int, high: int, side: str) -> int:
    bounds = f"from {byte_size_text(low)} to {byte_size_text(high)}"
    match = _BYTE_SIZE.fullmatch(text.strip())
    if match is None:
        raise InvalidOptionError.for_option(
            name,
            text,
            "is not a byte size",
            f"give a number of bytes with an optional unit k, m, g or t (e.g. '64m'), {bounds}",
            side=side,
        )
    value = int(match.group(1)) << _BYTE_UNITS[match.group(2).lower()]
    if not low <= value <= high:
        raise InvalidOptionError.for_option(
            name,
            text,
            f"is out of range {byte_size_text(low)}-{byte_size_text(high)}",
            f"give a byte size {bounds}",
            side=side,
        )
    return value


def _to_bool(name: str, text: str, side: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise InvalidOptionError.for_option(
        name, lowered, "is not a boolean", "use 'true' or 'false'", side=side
    )


def _rule(entry: str) -> tuple[str, str | None, str]:
    """``"option=value because why"`` -> (option, value or None, why)."""
    condition, _, why = entry.partition(" because ")
    option, equals, value = condition.partition("=")
    return option, (value if equals else None), why


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# -- a docs table --------------------------------------------------------------------------------


def _kind_text(spec: OptionSpec) -> str:
    if spec.kind == "int":
        return f"integer {_number(spec.low or 0)}-{_number(spec.high or 0)}"
    if spec.kind == "seconds":
        return f"seconds {_number(spec.low or 0)}-{_number(spec.high or 0)}"
    if spec.kind == "bytes":
        low, high = int(spec.low or 0), int(spec.high or 0)
        return f"byte size {byte_size_text(low)}-{byte_size_text(high)}"
    if spec.kind == "choice":
        return " or ".join(f"`{c}`" for c in spec.choices)
    return {
        "bool": "boolean",
        "url": "URL",
        "queueUrl": "queue URL",
        "list": f"list of {spec.shape}",
        "str": "string",
    }[spec.kind]


def _conditions(entries: tuple[str, ...]) -> str:
    shown = []
    for entry in entries:
        option, value, _ = _rule(entry)
        shown.append(f"`{option}={value}`" if value is not None else f"`{option}`")
    return ", ".join(shown)


def render_markdown(table: OptionTable) -> str:
    """A Markdown table of ``table``: one row per option, with its kind, default, meaning, and
    the options it needs or excludes."""
    excluded_by: dict[str, list[str]] = {}
    for spec in table.specs:
        for entry in spec.excludes:
            option, value, _ = _rule(entry)
            if value is None:
                excluded_by.setdefault(option, []).append(spec.name)
    lines = ["| option | type | default | meaning |", "| --- | --- | --- | --- |"]
    for spec in table.specs:
        meaning = spec.doc
        if spec.requires:
            meaning += f" Only with {_conditions(spec.requires)}."
        excludes = (*spec.excludes, *excluded_by.get(spec.name, ()))
        if excludes:
            meaning += f" Not with {_conditions(excludes)}."
        if spec.aliases:
            meaning += " Also spelled " + ", ".join(f"`{a}`" for a in spec.aliases) + "."
        default = f"`{spec.default}`" if spec.default is not None else ""
        lines.append(f"| `{spec.name}` | {_kind_text(spec)} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"
