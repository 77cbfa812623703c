"""Deterministic fact extraction: the values, names, numbers, dates and quoted strings a text
states, and the cue words that mark a request to forget or a correction.

No model is involved: a fact is a normalised token or phrase found by a pattern, so the same
text always gives the same facts and a detector's evidence can be checked by hand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from sys import intern

__all__ = [
    "asks_to_change",
    "asks_to_forget",
    "correction_old_values",
    "facts",
    "is_correction",
    "near_equal",
    "normalise",
    "strings_in",
    "word_set",
    "words",
]

_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
# Each pattern below that can only match at a few first characters says so in a lookahead: the
# same matches (the lookahead holds wherever a match can start), found several times faster.
_DATE = re.compile(
    r"(?=\d|[adfjmnos])\b(\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4}|(?:"
    + _MONTHS
    + r")\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?"
    r"|\d{1,2}(?:st|nd|rd|th)? (?:" + _MONTHS + r")(?:,? \d{4})?)\b",
    re.IGNORECASE,
)
_DIGIT = re.compile(r"\d")  # every date and number holds one
_ASCII_DIGIT = re.compile(r"[0-9]")  # ``_DIGIT`` for ASCII text (a range, not a Unicode category)
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,:]\d+)*%?")
_QUOTED = re.compile(r"\"([^\"]{1,80})\"|“([^”]{1,80})”|'([^'\s][^']{0,78}[^'\s])'(?!\w)")
# ``\b[A-Z]...``, written to open with the capital itself (a character class the search skips to
# in C) and the word boundary before it checked behind it: the same matches, twice as fast.
_NAME = re.compile(r"[A-Z](?<!\w[A-Z])[\w'-]*(?:\s+[A-Z][\w'-]*)*")
# Verbs that follow "to" as an infinitive ("nothing to change", "need to sort out", "happy to
# help"): what follows is an action, not a value. Words that are as often the place or thing
# reached ("get to work", "went to school") are left out.
_INFINITIVE = (
    "be|have|do|say|get|make|go|know|take|see|come|think|look|want|give|use|find|tell|ask|seem|feel"
    "|try|leave|call|keep|let|begin|help|talk|turn|start|show|hear|play|run|move|live|believe|hold"
    "|bring|happen|write|provide|sit|stand|lose|pay|meet|include|continue|set|learn|change|lead"
    "|understand|watch|follow|stop|create|speak|read|allow|add|spend|grow|open|walk|win|offer"
    "|remember|love|like|consider|appear|buy|wait|serve|send|expect|build|stay|fall|cut|reach"
    "|remain|suggest|raise|pass|sell|require|report|decide|pull|sort|remind|check|plan|book|visit"
    "|finish|cook|eat|drink|sleep|fix|clean|pack|travel|drive|ride|forget|update|note|share|catch"
    "|figure|deal|confirm|mention|avoid|enjoy|prepare|answer|handle|review|schedule|cancel|pick"
    "|drop|join|apply|attend|arrange|organise|organize|discuss|explain|hide|hear|mind|put|bother"
)
# "is X", "are X", "was X", "to X", "=", ":" followed by up to three lowercase words: the value
# a statement gives ("favourite colour is dark blue", "moved to berlin"). Not a value: what
# "that", "this", "it" or "which" is (an evaluation of what was said: "That is a nice
# coincidence", "it is better"), nor an infinitive after "to".
_VALUE = re.compile(
    r"(?=[iawtpluhnc=:])"  # the first characters a match can start with (see above), for both
    # branches; the three word branches' ``\b`` tested once, before them (most positions are
    # inside a word and fail it): the same matches, a quarter faster.
    # "is", "are"... looked ahead for before the four lookbehinds (the same zero-width tests at
    # one position, in a cheaper order: most positions fail the first).
    r"(?:\b(?:(?=is|are|was|were)"
    r"(?<!\b[Tt]hat )(?<!\b[Tt]his )(?<!\b[Ii]t )(?<!\b[Ww]hich )(?:is|are|was|were)"
    r"|to(?=\s+(?!(?:" + _INFINITIVE + r")\b))"
    r"|(?:prefers?|likes?|loves?|uses?|hates?|named|called))\s+"
    r"((?:(?:a|an|the|my|his|her|their)\s+)?[a-z][\w-]*(?:\s+[a-z][\w-]*){0,2})"
    r"|[=:]\s*([^\s,;.]+(?:\s+[^\s,;.]+){0,2}))"
)
_WORD = re.compile(r"[\w'-]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "with",
        "by",
        "from",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "they",
        "them",
        "their",
        "not",
        "no",
        "yes",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "will",
        "would",
        "can",
        "could",
        "should",
        "may",
        "might",
        "must",
        "about",
        "into",
        "over",
        "than",
        "then",
        "so",
        "if",
        "when",
        "while",
        "also",
        "just",
        "very",
        "really",
        "now",
        "still",
        "new",
        "sure",
        "since",
        "okay",
        "ok",
        "fine",
        "good",
        "great",
        "done",
        "going",
        "able",
        "here",
        "there",
        "what",
        "which",
        "who",
        "how",
        "why",
        "all",
        "any",
        "some",
        "more",
        "most",
        "one",
        "understood",
        "user",
        "users",
        "agent",
        "assistant",
        "memory",
        "myself",
        "yourself",
        "himself",
        "herself",
        "itself",
        "ourselves",
        "themselves",
    ]
)
_SENTENCE_START_STOP = frozenset(
    [
        "The",
        "A",
        "An",
        "I",
        "It",
        "This",
        "That",
        "These",
        "Those",
        "My",
        "Our",
        "Your",
        "His",
        "Her",
        "Their",
        "We",
        "You",
        "He",
        "She",
        "They",
        "User",
        "Users",
        "Assistant",
        "Also",
        "Now",
        "Actually",
        "Please",
        "Remember",
        "Note",
        "Today",
        "Yesterday",
        # pronoun contractions and discourse words that open a sentence or a clause, never a name
        "I'll",
        "I'm",
        "I've",
        "I'd",
        "Let's",
        "Got",
        "Understood",
        "Noted",
        "Updated",
        "Done",
        "Right",
        "Fine",
        "Agreed",
        "Confirmed",
        "Saved",
        "Thanks",
        "Sure",
        "Okay",
        "OK",
        "Yes",
        "No",
        "Hi",
        "Hello",
        "Great",
        "Quick",
        "Small",
        "Funny",
        "Update",
        "Heads",
        "Any",
        "Just",
        "So",
        "Well",
        "But",
        "And",
        "If",
        "When",
        "After",
        "Before",
        # contractions and phatic openers of acknowledgements ("That's fine", "Glad you enjoyed it")
        "That's",
        "It's",
        "There's",
        "Here's",
        "What's",
        "Don't",
        "Can't",
        "Won't",
        "Glad",
        "Happy",
        "Sorry",
        "Nice",
        "Cool",
        "Perfect",
        "Good",
        "Nothing",
        "Welcome",
    ]
)

_FORGET = re.compile(
    r"(?=[cdefnprsw])\b(forget|delete|remove|erase|drop|discard|clear|wipe|purge"
    r"|don'?t remember|do not remember|stop remembering|no longer (?:remember|store|keep))\b",
    re.IGNORECASE,
)
_CHANGE = re.compile(
    r"(?=[acimnrsuw])\b(actually|correction|correct(?:ed|ing)?|change[ds]?|update[ds]?|instead|no longer"
    r"|not any ?more|anymore|moved|switched|now (?:is|are|live|work|prefer|use)|replace[ds]?|wrong|mistake"
    r"|rather)\b",
    re.IGNORECASE,
)
_OLD_VALUE = re.compile(
    r"\b(?:from|instead of|no longer|not|rather than|previously|formerly|used to be|was)\s+"
    r"((?:[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)|\d+(?:[.,:]\d+)*|[a-z][\w-]*)",
)


def strings_in(value: object, skip_keys: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every string in a JSON value (ids, contents, names), recursively; what ``skip_keys`` hold
    is left out."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key not in skip_keys:
                yield from strings_in(inner, skip_keys)
    elif isinstance(value, list):
        for inner in value:
            yield from strings_in(inner, skip_keys)


@lru_cache(maxsize=16384)
def normalise(text: str) -> str:
    return " ".join(_WORD.findall(text.casefold()))


@lru_cache(maxsize=16384)
def word_set(text: str) -> frozenset[str]:
    """Every word of the normalised text (a live item's words; what the duplicate rule compares).
    The words are interned: every live item holds its word set, and a trace's words mostly repeat,
    so a million items share one string per distinct word instead of holding a dozen each (and
    equal words compare, and are found in the word index, by identity)."""
    return frozenset(map(intern, normalise(text).split()))


def words(text: str) -> frozenset[str]:
    """The content words of a text (case-folded, stop words removed)."""
    return frozenset(w for w in _WORD.findall(text.casefold()) if w not in _STOP and len(w) > 1)


_QUESTION = re.compile(r"[^.!?\n]*\?")  # a question: from the last sentence end to its "?"


@lru_cache(maxsize=65536)
def facts(text: str) -> frozenset[str]:
    """The facts a text states, normalised: dates, numbers, quoted strings, capitalised names
    (not a lone sentence-opening word) and value phrases. A question states none ("What do you
    know about Leo's job?" names no fact of Leo's; a chat proxy that stores user turns stores
    questions too)."""
    if "?" in text:
        text = _QUESTION.sub(" ", text)
    found: set[str] = set()
    if (_ASCII_DIGIT if text.isascii() else _DIGIT).search(text) is not None:  # else no date and no number
        for match in _DATE.finditer(text):
            found.add(normalise(match.group(0)))
        undated = _DATE.sub(" ", text) if found else text  # no date: nothing to blank out
        for match in _NUMBER.finditer(undated):
            found.add(match.group(0).rstrip(".,:").casefold())
    if '"' in text or "'" in text or "“" in text:  # else nothing quoted
        for match in _QUOTED.finditer(text):
            quoted = next(g for g in match.groups() if g)
            found.add(normalise(quoted))
    # ``findall``, not ``finditer``: the matched texts without a match object each.
    for name in _NAME.findall(text):
        parts = name.split()
        while parts and parts[0] in _SENTENCE_START_STOP:
            parts = parts[1:]
        if parts:
            found.add(normalise(" ".join(parts)))
    for phrase, assigned in _VALUE.findall(text):  # its two groups ("" for the one not matched)
        value = normalise(phrase or assigned)
        value = " ".join(w for w in value.split() if w not in _STOP)
        if value:
            found.add(value)
    found.discard("")
    return frozenset(found)


def survives(fact: str, text_facts: frozenset[str], text_norm: str) -> bool:
    """Whether ``fact`` is still stated by a text (as a fact of it, or inside its words)."""
    if fact in text_facts:
        return True
    return f" {fact} " in f" {text_norm} "


# The cue patterns without IGNORECASE, for ASCII text lowered first: their letters are all lower
# case ASCII, and in ASCII text a letter matches one of them ignoring case exactly when its lower
# case does (the characters that also fold to them, such as the Kelvin sign, are not ASCII; \b and
# \s are unchanged by lowering). The same answers, about a third faster (these run on every write).
_FORGET_LOWER = re.compile(_FORGET.pattern)
_CHANGE_LOWER = re.compile(_CHANGE.pattern)


def asks_to_forget(text: str) -> bool:
    if text.isascii():
        lowered = text.lower()
        # Every match of ``_FORGET`` holds one of these (found in C, without trying the pattern at
        # every position): most texts hold none. A word added to the pattern belongs here too
        # (tests/test_findings_quality.py spells every match of the pattern and fails otherwise).
        if not (
            "forget" in lowered
            or "delete" in lowered
            or "remove" in lowered
            or "erase" in lowered
            or "drop" in lowered
            or "discard" in lowered
            or "clear" in lowered
            or "wipe" in lowered
            or "purge" in lowered
            or "remember" in lowered
            or "no longer" in lowered
        ):
            return False
        return _FORGET_LOWER.search(lowered) is not None
    return _FORGET.search(text) is not None


def asks_to_change(text: str) -> bool:
    return is_correction(text) or asks_to_forget(text)


@lru_cache(maxsize=4096)
def is_correction(text: str) -> bool:
    if text.isascii():
        return _CHANGE_LOWER.search(text.lower()) is not None
    return _CHANGE.search(text) is not None


def correction_old_values(text: str) -> frozenset[str]:
    """The values a correction says are no longer true ("moved from Paris", "not 30",
    "instead of tea"), normalised."""
    return frozenset(value for value in map(normalise, _OLD_VALUE.findall(text)) if value)


def near_equal(a: str, b: str, threshold: float = 0.9) -> bool:
    """Equal after normalisation, or word sets with Jaccard similarity at least ``threshold``."""
    na, nb = normalise(a), normalise(b)
    if na == nb:
        return True
    wa, wb = set(na.split()), set(nb.split())
    if not wa or not wb:
        return False
    return len(wa & wb) / len(wa | wb) >= threshold
