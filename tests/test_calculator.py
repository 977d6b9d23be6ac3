"""The calculator (core/calculator.py): right answers for what it allows, a clear refusal for every
attack on it (code, attributes, huge numbers, deep nesting, long input), each within its bounds."""

from __future__ import annotations

import math
import re
import time

import pytest

from core.calculator import CalculatorError, Limits, evaluate, format_number


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("2 ** 10", 1024),
        ("2 ** -1", 0.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("7 / 2", 3.5),
        ("-(3 - 5)", 2),
        ("sqrt(16)", 4.0),
        ("log(8, 2)", 3.0),
        ("ln(e)", 1.0),
        ("log(e ** 2)", 2.0),
        ("exp(0)", 1.0),
        ("sin(0) + cos(0) + tan(0)", 1.0),
        ("abs(-3.5)", 3.5),
        ("round(2.567, 2)", 2.57),
        ("round(2.5)", 2),
        ("floor(-2.5)", -3),
        ("ceil(2.1)", 3),
        ("factorial(10)", 3628800),
        ("min(3, 1, 2) + max(4, 9)", 10),
        ("2 * pi", 2 * math.pi),
        ("10 ** 1000", 10**1000),  # the largest integer allowed
        ("1e3 * 2", 2000.0),
    ],
)
def test_arithmetic_and_functions(expression: str, expected: float) -> None:
    value = evaluate(expression)
    assert value == pytest.approx(expected, rel=1e-12)
    assert type(value) is type(expected)


def test_results_read_well() -> None:
    assert format_number(evaluate("0.1 + 0.2")) == "0.3"
    assert format_number(evaluate("sqrt(2)")) == "1.4142135623731"  # 15 significant digits
    assert format_number(7006652, grouped=True) == "7,006,652"
    assert format_number(evaluate("1234567.891 * 1"), grouped=True) == "1,234,567.891"
    assert format_number(evaluate("52000 * 0.78 / 12"), grouped=True) == "3,380"
    assert format_number(evaluate("4 / 2")) == "2"
    assert format_number(evaluate("2 ** 100")) == str(2**100)


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("__import__('os').system('id')", "not allowed"),
        ("().__class__", "Attribute is not allowed"),
        ("(1).__class__.__bases__", "Attribute is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("[x for x in (1, 2)]", "ListComp is not allowed"),
        ("{x: 1 for x in (1,)}", "DictComp is not allowed"),
        ("sum(x for x in (1,))", "unknown function 'sum'"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("eval('1')", "unknown function 'eval'"),
        ("x", "unknown name 'x'"),
        ("sqrt", "is a function"),
        ("'a' * 3", "str values are not allowed"),
        ("True + 1", "bool values are not allowed"),
        ("1j * 1j", "complex values are not allowed"),
        ("1 if 1 else 2", "IfExp is not allowed"),
        ("1 < 2", "Compare is not allowed"),
        ("2 ^ 3", "use ** for powers"),
        ("(x := 1)", "NamedExpr is not allowed"),
        ("sqrt(x=4)", "positional arguments only"),
        ("min(*(1, 2))", "not allowed"),
        ("max(1)", "takes 2 to 50 argument(s)"),
        ("1 +", "not a valid expression"),
        ("1; import os", "not a valid expression"),
        ("", "empty"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("(-8) ** (1 / 3)", "not real"),
        ("exp(1000)", "too large"),
        ("1e308 * 10", "too large"),
        ("10 ** 1000 / 3", "too large"),
    ],
)
def test_refused_with_a_reason(expression: str, reason: str) -> None:
    with pytest.raises(CalculatorError, match=re.escape(reason)):
        evaluate(expression)


@pytest.mark.parametrize(
    "expression",
    ["2 ** 999999", "9 ** 9 ** 9", "10 ** 1001", "(10 ** 600) * (10 ** 600)", "10 ** 1000 + 1"],
)
def test_huge_integers_are_refused_before_they_are_computed(expression: str) -> None:
    started = time.perf_counter()
    with pytest.raises(CalculatorError, match=r"larger than 10\*\*1000"):
        evaluate(expression)
    # 9 ** 9 ** 9 computed would take minutes and gigabytes; refused, it takes nothing.
    assert time.perf_counter() - started < 0.1


def test_factorial_is_bounded() -> None:
    assert evaluate("factorial(400)") == math.factorial(400)
    for expression in ("factorial(401)", "factorial(10 ** 9)", "factorial(factorial(10))"):
        with pytest.raises(CalculatorError, match="up to 400"):
            evaluate(expression)
    with pytest.raises(CalculatorError, match="whole number"):
        evaluate("factorial(2.5)")
    with pytest.raises(CalculatorError, match="negative"):
        evaluate("factorial(-1)")


def test_round_is_bounded() -> None:
    with pytest.raises(CalculatorError, match="at most 100 digits"):
        evaluate("round(1.5, 10 ** 9)")


def test_deep_nesting_is_a_clear_error_not_a_crash() -> None:
    # Within the length limit: the nesting limit refuses it.
    with pytest.raises(CalculatorError, match="nested too deeply"):
        evaluate("-" * 400 + "1")
    with pytest.raises(CalculatorError, match="nested too deeply"):
        evaluate("(" * 240 + "1" + ")" * 240)  # CPython's parser: too many nested parentheses
    # With the other limits lifted, Python's own recursion limit is reached, in the parser and
    # in the walk: a RecursionError (or the parser's MemoryError) becomes the same clear error.
    unlimited = Limits(max_chars=10**6, max_depth=10**6)
    for expression in ("-" * 900 + "1", "-" * 2000 + "1", "-" * 5000 + "1", "(" * 9000 + "1"):
        with pytest.raises(CalculatorError, match="nested too deeply"):
            evaluate(expression, unlimited)


def test_long_input_and_nul_bytes_are_refused() -> None:
    with pytest.raises(CalculatorError, match="longer than 500 characters"):
        evaluate("1+" * 300 + "1")
    assert evaluate("1+" * 200 + "1") == 201
    with pytest.raises(CalculatorError, match="NUL"):
        evaluate("1 +\x00 2")
    with pytest.raises(CalculatorError, match="must be text"):
        evaluate(b"1 + 2")  # type: ignore[arg-type]


def test_the_walk_stops_at_its_deadline() -> None:
    # Every step is bounded, so only a tiny budget shows the backstop at work.
    with pytest.raises(CalculatorError, match="took longer than"):
        evaluate("factorial(400) * 1 + " * 20 + "1", Limits(seconds=0.0))


def test_date_gives_a_day_number_so_a_difference_is_a_count_of_days() -> None:
    assert evaluate("date(2026, 7, 19) - date(2026, 3, 3)") == 138
    assert evaluate("(date(2027, 1, 1) - date(2026, 12, 7)) / 7") == 25 / 7
    assert evaluate("date(2028, 3, 1) - date(2028, 2, 28)") == 2  # a leap year
    for expression, reason in [
        ("date(2026, 2, 30)", "day is out of range"),
        ("date(2026, 13, 1)", "month must be in 1..12"),
        ("date(2026.5, 1, 1)", "whole numbers"),
        ("date(2026, 1)", "takes"),
    ]:
        with pytest.raises(CalculatorError, match=reason):
            evaluate(expression)
