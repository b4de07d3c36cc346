"""Go-compatible rendering of JSON values, so that keys, identifiers and messages match kube-apiserver byte for byte.

kube-apiserver writes FieldsV1 keys (``k:{"name":"FOO"}``, ``v:"x"``), manager identifiers and the
``kubectl.kubernetes.io/last-applied-configuration`` annotation with Go's ``encoding/json``: compact, object keys
sorted, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c``..., floats in their shortest form (``1``, not
``1.0``). Conflict messages render values with structured-merge-diff's ``value.ToString`` (Go's ``%q`` for strings,
``%v`` for numbers). Python's ``json`` module differs on each of these points, hence this module.

Contract: every function takes a JSON value (dict with str keys, list, str, int, float, bool, None) and returns text;
none of them fails on valid JSON values.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

_HEX = "0123456789abcdef"

# encoding/json's short escapes; every other control character becomes \u00XX.
_JSON_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
# Escaped because encoding/json's HTML-safe mode (the default of json.Marshal and json.Encoder) escapes them.
_JSON_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}

# strconv.Quote's short escapes.
_QUOTE_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def dumps(value: Any) -> str:
    """``json.Marshal(value)``: compact, keys sorted, HTML-safe escaping, Go float formatting."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, list):
        return "[" + ",".join(dumps(item) for item in value) + "]"
    if isinstance(value, dict):
        # Go sorts map keys by their bytes; code point order is the same order for UTF-8.
        return "{" + ",".join(json_string(key) + ":" + dumps(value[key]) for key in sorted(value)) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def json_string(text: str) -> str:
    """A JSON string literal as encoding/json writes it."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _JSON_SHORT_ESCAPES:
            out.append(_JSON_SHORT_ESCAPES[char])
        elif char in _JSON_HTML_ESCAPES:
            out.append(_JSON_HTML_ESCAPES[char])
        elif code < 0x20:
            out.append("\\u00" + _HEX[code >> 4] + _HEX[code & 0xF])
        elif 0xD800 <= code <= 0xDFFF:
            # A lone surrogate cannot be UTF-8 encoded; Go replaces invalid UTF-8 with U+FFFD.
            out.append("\\ufffd")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def json_float(number: float) -> str:
    """A float as encoding/json writes it: shortest digits, exponent only below 1e-6 or from 1e21 on."""
    digits, point, negative = _shortest_digits(number)
    magnitude = abs(number)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        text = _exponent_form(digits, point, negative)
        # encoding/json shortens a two-digit negative exponent: 1e-07 becomes 1e-7.
        if len(text) >= 4 and text[-4] == "e" and text[-3] == "-" and text[-2] == "0":
            text = text[:-2] + text[-1]
        return text
    return _fixed_form(digits, point, negative)


def quote(text: str) -> str:
    """Go's ``%q`` of a string (``strconv.Quote``)."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _QUOTE_SHORT_ESCAPES:
            out.append(_QUOTE_SHORT_ESCAPES[char])
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif char.isprintable():
            out.append(char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def value_string(value: Any) -> str:
    """structured-merge-diff's ``value.ToString``, used for keys and set values in conflict paths."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_v_float(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list):
        return "[" + ",".join(value_string(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ";".join(f"{key}={value_string(value[key])}" for key in sorted(value)) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _go_v_float(number: float) -> str:
    """Go's ``%v`` of a float64: shortest digits, exponent form below 1e-4 or from 1e6 on (strconv's 'g', -1)."""
    digits, point, negative = _shortest_digits(number)
    exponent = point - 1
    if number != 0 and (exponent < -4 or exponent >= 6):
        return _exponent_form(digits, point, negative)
    return _fixed_form(digits, point, negative)


def _shortest_digits(number: float) -> tuple[str, int, bool]:
    """The shortest decimal digits that round-trip ``number`` and the position of the decimal point after them.

    Python's ``repr`` and Go's ``strconv.FormatFloat(f, fmt, -1, 64)`` both produce the shortest round-tripping
    digits; only the layout differs, and the layout is rebuilt by the callers.
    """
    if math.isnan(number) or math.isinf(number):
        raise ValueError("NaN and infinities are not JSON values")
    normalized = Decimal(repr(number)).normalize()
    sign, digit_tuple, exponent = normalized.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(str(digit) for digit in digit_tuple)
    if digits == "0":
        return "0", 1, bool(sign)
    return digits, len(digits) + exponent, bool(sign)


def _fixed_form(digits: str, point: int, negative: bool) -> str:
    if digits == "0":
        text = "0"
    elif point <= 0:
        text = "0." + "0" * -point + digits
    elif point >= len(digits):
        text = digits + "0" * (point - len(digits))
    else:
        text = digits[:point] + "." + digits[point:]
    return "-" + text if negative else text


def _exponent_form(digits: str, point: int, negative: bool) -> str:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    exponent = point - 1
    sign = "-" if exponent < 0 else "+"
    text = f"{mantissa}e{sign}{abs(exponent):02d}"
    return "-" + text if negative else text
