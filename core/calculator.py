"""Safe arithmetic for the `calculator` tool: an expression is parsed with `ast` and its tree
walked node by node against a whitelist; nothing of it is ever eval'd, exec'd or compiled.

Allowed: numbers (int, float), + - * / // % **, unary + and -, parentheses, the constants pi and
e, and the functions in `FUNCTIONS` (sqrt, log, ln, exp, sin, cos, tan, abs, round, floor, ceil,
factorial, min, max, and date(year, month, day), a day number, so that a difference of two dates
is a count of days). Anything else (names, attributes, calls of anything but those, lambdas,
comprehensions, strings, comparisons…) is refused with `CalculatorError` saying why.

Every costly step is bounded *before* it is computed, so no input can take the process's memory
or CPU: an integer result may be at most 10 ** `Limits.max_digits` (a power or a product that
would be larger is refused from its operands' sizes), factorial's argument is capped, the input's
length and nesting are capped, and the walk stops after `Limits.seconds`.
"""

from __future__ import annotations

import ast
import datetime
import math
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Number = int | float

LOG2_10 = math.log2(10)


class CalculatorError(ValueError):
    """The expression is refused or cannot be computed; the message says why, for the model."""


@dataclass(frozen=True)
class Limits:
    max_chars: int = 500  # of the expression
    max_depth: int = 300  # nesting of the tree (a sum of n terms nests n deep), well within
    # Python's recursion limit (two frames a level)
    max_digits: int = 1000  # an integer above 10**1000 is refused (before computing it)
    max_factorial: int = 400  # 400! has 869 digits
    max_round_digits: int = 100  # round(x, n): |n| at most this
    seconds: float = 0.5  # for the whole walk (every step is bounded, so this is a backstop)


DEFAULT_LIMITS = Limits()


def _factorial(n: Number, limits: Limits) -> int:
    if isinstance(n, float):
        if not n.is_integer():
            raise CalculatorError("factorial() takes a whole number")
        n = int(n)
    if n < 0:
        raise CalculatorError("factorial() of a negative number is not defined")
    if n > limits.max_factorial:
        raise CalculatorError(f"factorial() is limited to numbers up to {limits.max_factorial}")
    return math.factorial(n)


def _round(x: Number, ndigits: Number | None = None, *, limits: Limits) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int):
        raise CalculatorError("round()'s second argument must be a whole number")
    if abs(ndigits) > limits.max_round_digits:
        raise CalculatorError(f"round() keeps at most {limits.max_round_digits} digits")
    return round(x, ndigits)


def _day_number(year: Number, month: Number, day: Number) -> int:
    """The date's day number (1 for 1 January of year 1), so that a difference of two is a count
    of days: date(2026, 7, 19) - date(2026, 3, 3) is 138."""
    parts = []
    for part in (year, month, day):
        if isinstance(part, float) and not part.is_integer():
            raise CalculatorError("date() takes whole numbers: date(year, month, day)")
        parts.append(int(part))
    return datetime.date(*parts).toordinal()  # ValueError for a day or month out of range


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


# name → (function, fewest arguments, most arguments (None: any number)); limits passed when the
# function takes them.
FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int | None]] = {
    "sqrt": (math.sqrt, 1, 1),
    "log": (_log, 1, 2),  # log(x) is the natural log, log(x, base) any base
    "ln": (math.log, 1, 1),
    "log10": (math.log10, 1, 1),
    "log2": (math.log2, 1, 1),
    "exp": (math.exp, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1),
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "factorial": (_factorial, 1, 1),
    "min": (min, 2, None),
    "max": (max, 2, None),
    "date": (_day_number, 3, 3),
}
NEEDS_LIMITS = {"factorial", "round"}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
MAX_ARGUMENTS = 50  # of min() and max()

BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def evaluate(expression: str, limits: Limits = DEFAULT_LIMITS) -> Number:
    """The value of `expression`; CalculatorError (with the reason) if refused or not computable."""
    if not isinstance(expression, str):
        raise CalculatorError("the expression must be text")
    if "\x00" in expression:
        raise CalculatorError("the expression contains a NUL character")
    if len(expression) > limits.max_chars:
        raise CalculatorError(f"the expression is longer than {limits.max_chars} characters")
    if not expression.strip():
        raise CalculatorError("the expression is empty")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (RecursionError, MemoryError):  # CPython's parser, on very deep nesting
        raise CalculatorError(_too_deep(limits)) from None
    except SyntaxError as error:
        if "nested" in str(error.msg):  # CPython's parser: "too many nested parentheses"
            raise CalculatorError(_too_deep(limits)) from None
        raise CalculatorError(f"not a valid expression ({error.msg})") from None
    except ValueError as error:
        raise CalculatorError(f"not a valid expression ({error})") from None
    walker = _Walker(limits)
    try:
        value = walker.value(tree.body, 1)
    except RecursionError:
        raise CalculatorError(_too_deep(limits)) from None
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None
    except (ValueError, TypeError) as error:
        if isinstance(error, CalculatorError):
            raise
        raise CalculatorError(f"cannot compute it: {error}") from None
    return value


def format_number(value: Number, grouped: bool = False) -> str:
    """The result as the model should read it: an integer in full, a float to 15 digits;
    `grouped`: with commas between thousands ("7,006,652"), which a small model writing the
    answer for a person otherwise adds itself, and misplaces ("700,665,2")."""
    comma = "," if grouped else ""
    if isinstance(value, int):
        return format(value, comma)
    if value.is_integer() and abs(value) < 1e15:
        return format(int(value), comma)
    return format(value, f"{comma}.15g")


def _too_deep(limits: Limits) -> str:
    return f"the expression is nested too deeply (at most {limits.max_depth} levels)"


class _Walker:
    """Computes a parsed expression, refusing every node the whitelist does not name."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.largest = 10**limits.max_digits
        self.max_bits = limits.max_digits * LOG2_10  # of the largest integer allowed

    def value(self, node: ast.AST, depth: int) -> Number:
        if depth > self.limits.max_depth:
            raise CalculatorError(_too_deep(self.limits))
        if time.monotonic() > self.deadline:
            raise CalculatorError(f"the computation took longer than {self.limits.seconds} s")
        return self._checked(self._node(node, depth))

    def _node(self, node: ast.AST, depth: int) -> Number:
        if isinstance(node, ast.Constant):
            # bool is an int subclass: True + 1 is not arithmetic anyone means.
            if type(node.value) in (int, float):
                return node.value
            raise CalculatorError(f"{type(node.value).__name__} values are not allowed")
        if isinstance(node, ast.BinOp):
            operation = BINARY.get(type(node.op))
            if operation is None:
                hint = " (use ** for powers)" if isinstance(node.op, ast.BitXor) else ""
                raise CalculatorError(f"the operator {_what(node.op)} is not allowed{hint}")
            left = self.value(node.left, depth + 1)
            right = self.value(node.right, depth + 1)
            if isinstance(node.op, ast.Pow):
                return self._power(left, right)
            if isinstance(node.op, ast.Mult):
                self._check_product(left, right)
            return operation(left, right)
        if isinstance(node, ast.UnaryOp):
            unary = UNARY.get(type(node.op))
            if unary is None:
                raise CalculatorError(f"the operator {_what(node.op)} is not allowed")
            return unary(self.value(node.operand, depth + 1))
        if isinstance(node, ast.Name):
            if node.id in CONSTANTS:
                return CONSTANTS[node.id]
            if node.id in FUNCTIONS:
                raise CalculatorError(f"{node.id} is a function: call it, e.g. {node.id}(2)")
            raise CalculatorError(f"unknown name {node.id!r}; {_known()}")
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        raise CalculatorError(f"{_what(node)} is not allowed in a calculation; {_known()}")

    def _call(self, node: ast.Call, depth: int) -> Number:
        if not isinstance(node.func, ast.Name):
            raise CalculatorError(f"{_what(node.func)} is not allowed in a calculation; {_known()}")
        if node.func.id not in FUNCTIONS:
            raise CalculatorError(f"unknown function {node.func.id!r}; {_known()}")
        if node.keywords:
            raise CalculatorError("functions take positional arguments only")
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise CalculatorError("starred arguments are not allowed")
        name = node.func.id
        function, fewest, most = FUNCTIONS[name]
        count = len(node.args)
        if count < fewest or (most is not None and count > most) or count > MAX_ARGUMENTS:
            wanted = f"{fewest}" if most == fewest else f"{fewest} to {most or MAX_ARGUMENTS}"
            raise CalculatorError(f"{name}() takes {wanted} argument(s), not {count}")
        args = [self.value(arg, depth + 1) for arg in node.args]
        if name in NEEDS_LIMITS:
            return function(*args, limits=self.limits)
        return function(*args)

    def _power(self, base: Number, exponent: Number) -> Number:
        if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
            # The result's size from its operands', before computing it: 2 ** 999999 or 9**9**9
            # would take seconds and megabytes.
            bits = exponent * math.log2(abs(base))
            if bits > self.max_bits + 1e-9:
                raise CalculatorError(self._too_large())
        fractional = isinstance(exponent, float) and not exponent.is_integer()
        if base < 0 and fractional:  # Python would answer with a complex number
            raise CalculatorError("a negative number to a fractional power is not real")
        return operator.pow(base, exponent)

    def _check_product(self, left: Number, right: Number) -> None:
        # A product of integers is at least 2 ** (the sum of their bit lengths - 2).
        both = isinstance(left, int) and isinstance(right, int)
        if both and left.bit_length() + right.bit_length() - 2 > self.max_bits:
            raise CalculatorError(self._too_large())

    def _checked(self, value: Any) -> Number:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CalculatorError("the result is not a real number")
        if isinstance(value, int) and abs(value) > self.largest:
            raise CalculatorError(self._too_large())
        if isinstance(value, float) and not math.isfinite(value):
            raise CalculatorError(
                "the result is too large" if math.isinf(value) else "not a number"
            )
        return value

    def _too_large(self) -> str:
        return f"the result would be larger than 10**{self.limits.max_digits}"


def _what(node: ast.AST) -> str:
    names = {ast.BitXor: "^", ast.BitAnd: "&", ast.BitOr: "|", ast.LShift: "<<",
             ast.RShift: ">>", ast.MatMult: "@", ast.Invert: "~", ast.Not: "not"}  # fmt: skip
    return names.get(type(node), type(node).__name__)


def _known() -> str:
    return f"allowed: numbers, + - * / // % **, {', '.join(CONSTANTS)}, {', '.join(FUNCTIONS)}"
