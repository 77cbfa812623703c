"""Text normalisation shared by alignment and the answer scorers.

Two views of a text:

- **tokens** (:func:`tokens`): lower-case words with stop words, the third-person "user" and
  a plural or third-person ``s`` removed, number words as digits; used for coverage between a
  memory item and a gold memory, and for token F1;
- **values** (:func:`normalise_value`, :func:`value_match`): a short gold value (``"CrossFit
  Central"``, ``"3 retries"``, ``"9:30 am"``) looked for as a whole phrase, first as it is and
  then after normalisation (lower case, leading articles and copulas, trailing punctuation,
  time prepositions, thousands separators, ordinals, number words, and a unit after a number).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = [
    "NUMBER_WORDS",
    "STOP_WORDS",
    "normalise_value",
    "phrase_in",
    "tokens",
    "value_in",
    "value_match",
    "words",
]

NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "thirteen": "13", "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17",
    "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40",
    "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90",
    "hundred": "100",
}  # fmt: skip
_STOP = (
    "a an and are as at be been but by did do does for from had has have he her his i in is it its me "
    "my of on or our she so that the their them there they this to us was we were what when where "
    "which who will with you your user user's users"
)
STOP_WORDS = frozenset(_STOP.split())
UNITS = (
    "retries", "retry", "times", "attempts", "tries", "ms", "seconds", "second", "minutes", "minute",
    "hours", "hour", "days", "day", "weeks", "week", "months", "month", "years", "year", "gb", "mb",
    "kb", "tb", "percent", "%", "dollars", "dollar", "usd", "eur", "euros", "am", "pm",
)  # fmt: skip
_WORD = re.compile(r"[a-z0-9]+(?:[.:'][a-z0-9]+)*")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_ORDINAL = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b")
_LEADING = re.compile(
    r"^(?:(?:the|a|an|my|our|their|its|his|her|your)\s+(?:[\w'-]+\s+){0,5}?)?"
    r"(?:is|was|are|were|remains|remained|is still|was still)\s+"
)
_ARTICLE = re.compile(r"^(?:the|a|an)\s+")
_PREPOSITIONS = re.compile(r"\b(?:at|on|in|by|around|about|approximately|roughly|since|until)\s+")
_NUMBER_UNIT = re.compile(r"\b(\d+(?:[.:]\d+)?)\s*(?:" + "|".join(re.escape(u) for u in UNITS) + r")\b")


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')


def _numbers(text: str) -> str:
    text = _ORDINAL.sub(r"\1", _THOUSANDS.sub("", text))
    return re.sub(r"\b(" + "|".join(NUMBER_WORDS) + r")\b", lambda m: NUMBER_WORDS[m.group(1)], text)


def words(text: str) -> list[str]:
    """Lower-case words (number words as digits, thousands separators dropped), in order."""
    return _WORD.findall(_numbers(_fold(text)))


def _stem(word: str) -> str:
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


@lru_cache(maxsize=65536)
def tokens(text: str) -> frozenset[str]:
    """Content tokens: words without stop words, with a plural or third-person ``s`` removed."""
    return frozenset(_stem(w) for w in words(text) if w not in STOP_WORDS)


def phrase_in(phrase: str, text: str) -> bool:
    """``phrase`` as a whole phrase of ``text`` (case-insensitive; "weekly" is not in "bi-weekly")."""
    phrase = phrase.strip()
    if not phrase:
        return False
    pattern = r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])"
    return re.search(pattern, text) is not None


def normalise_value(text: str) -> str:
    """A value reduced for comparison: lower case, number words as digits, no thousands separators,
    no leading article or "the X is"-style copula, no time prepositions, no trailing punctuation."""
    text = _numbers(_fold(text)).strip().strip("\"'")
    text = _LEADING.sub("", text)
    text = _ARTICLE.sub("", text)
    text = _PREPOSITIONS.sub("", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text.rstrip(".,;:!?\"'").strip()


def _number_of(value: str) -> str | None:
    """The number of a value that is only a number with an optional unit ("3 retries" -> "3")."""
    match = re.fullmatch(
        r"(\d+(?:[.:]\d+)?)\s*(?:" + "|".join(re.escape(u) for u in UNITS) + r")?", value.strip()
    )
    return match.group(1) if match else None


def value_match(gold: str, predicted: str) -> tuple[bool, str]:
    """Whether ``predicted`` holds the ``gold`` value, and by which rule (for the reason column)."""
    if not gold.strip() or not predicted.strip():
        return False, "empty"
    if phrase_in(_fold(gold).strip(), _fold(predicted)):
        return True, "contained"
    gold_n, pred_n = normalise_value(gold), normalise_value(predicted)
    if gold_n and phrase_in(gold_n, _numbers(_fold(predicted))):
        return True, f"normalised value {gold_n!r} contained"
    if gold_n and phrase_in(gold_n, pred_n):
        return True, f"normalised value {gold_n!r} contained after normalising the answer"
    number = _number_of(gold_n)
    if number is not None:
        spotted = {m.group(1) for m in _NUMBER_UNIT.finditer(pred_n)} | set(
            re.findall(r"(?<![\w.:])\d+(?:[.:]\d+)?(?![\w:]|\.\d)", pred_n)
        )
        if number in spotted:
            return True, f"number {number} (unit aside)"
    return False, f"{gold!r} not found"


def value_in(value: str, text: str) -> bool:
    return value_match(value, text)[0]
