"""The fact types the generators draw on: personal, work and agentic facts with value pools.

Each value pool is checked (by the tests) so that no value occurs inside another as a whole
phrase, so a value found in a turn is unambiguous. Templates use ``{v}`` for a value and
``{who}`` for another person or system.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DOMAIN", "FACTS", "NAMES", "FactType"]


@dataclass(frozen=True)
class FactType:
    name: str
    domain: str  # personal | work | agentic
    topic: str  # the fact as a noun phrase in a question: "the user's gym"
    noun: str  # what it is about, without the owner: "gym"
    values: tuple[str, ...]
    state: str  # the user says it: "I work out at {v}"
    fact: str  # the memory: "The user works out at {v}"
    other: str  # someone or something else has it: "{who} works out at {v}"

    @property
    def memory_type(self) -> str:
        return DOMAIN[self.domain].memory_type


@dataclass(frozen=True)
class Domain:
    memory_type: str
    others: tuple[str, ...]
    topics: tuple[str, ...]
    reasons: tuple[tuple[str, str], ...]  # (trigger, reason)


DOMAIN = {
    "personal": Domain(
        "user_profile",
        ("my sister", "a neighbour", "my friend Jamie", "my cousin Rosa"),
        ("sleeping better", "meal prepping for the week", "staying motivated", "planning a weekend away"),
        (
            ("a move across town", "it is closer to home now"),
            ("a new work schedule", "the old option no longer fits the week"),
            ("a doctor's advice", "it is better for my health"),
            ("a month-long trial", "I simply liked the new one more"),
        ),
    ),
    "work": Domain(
        "fact",
        ("the platform team", "another team", "my old team", "a partner company"),
        ("writing better meeting notes", "prioritising a backlog", "onboarding a new teammate"),
        (
            ("a request from the client", "the client needed it"),
            ("the reorganisation", "the team structure changed"),
            ("a process review", "the old way kept causing delays"),
            ("a planning meeting", "the roadmap moved"),
        ),
    ),
    "agentic": Domain(
        "agent_knowledge",
        ("the staging service", "a sibling service", "the billing service", "an old fork"),
        ("structuring log messages", "writing a runbook", "load testing an endpoint"),
        (
            ("upstream timeout issues", "requests kept failing before the upstream recovered"),
            ("an incident review", "the review asked for more headroom"),
            ("a load test", "the test showed the old setting was too tight"),
            ("a cost review", "the old setting was too expensive"),
        ),
    ),
}

FACTS: tuple[FactType, ...] = (
    FactType("gym", "personal", "the user's gym", "gym",
             ("FitLife", "CrossFit Central", "Iron Temple", "Peak Performance Club", "Harbor Athletic"),
             "I work out at {v}", "The user works out at {v}", "{who} works out at {v}"),
    FactType("diet", "personal", "the user's diet", "diet",
             ("vegetarian", "pescatarian", "vegan", "keto", "paleo"),
             "I eat {v} these days", "The user eats {v}", "{who} eats {v}"),
    FactType("commute", "personal", "the user's commute", "commute",
             ("by bike", "by bus", "by train", "by car", "on foot"),
             "I get to work {v}", "The user commutes {v}", "{who} commutes {v}"),
    FactType("dentist", "personal", "the user's dentist", "dentist",
             ("Dr. Okafor", "Dr. Lindqvist", "Dr. Moreau", "Dr. Takahashi", "Dr. Brennan"),
             "my dentist is {v}", "The user's dentist is {v}", "{who} sees {v} as a dentist"),
    FactType("coffee", "personal", "the user's usual coffee order", "coffee order",
             ("flat white", "oat latte", "cortado", "americano", "cold brew"),
             "my usual coffee is a {v}", "The user usually orders a {v}", "{who} always orders a {v}"),
    FactType("cadence", "work", "the team's deployment cadence", "deployment cadence",
             ("weekly", "daily", "monthly", "twice a week", "every sprint"),
             "we deploy {v}", "The team deploys {v}", "{who} deploys {v}"),
    FactType("standup", "work", "the team's standup time", "standup",
             ("9:30 am", "10:00 am", "9:00 am", "11:15 am", "8:45 am"),
             "our standup is at {v}", "The team's standup is at {v}", "{who} holds standup at {v}"),
    FactType("deadline", "work", "the paper's submission deadline", "submission deadline",
             ("March 28", "April 15", "May 2", "June 10", "February 20"),
             "the paper is due on {v}", "The paper's submission deadline is {v}",
             "{who} has a deadline on {v}"),
    FactType("manager", "work", "the user's project manager", "project manager",
             ("Priya Nair", "Tom Becker", "Lena Fischer", "Omar Haddad", "Grace Liu"),
             "my project manager is {v}", "The user's project manager is {v}", "{who} reports to {v}"),
    FactType("review", "work", "the team's code review tool", "code review tool",
             ("Gerrit", "GitHub pull requests", "Phabricator", "GitLab merge requests", "Reviewable"),
             "we review code in {v}", "The team reviews code in {v}", "{who} reviews code in {v}"),
    FactType("retries", "agentic", "the API retry count", "retry count",
             ("3 retries", "5 retries", "7 retries", "2 retries", "10 retries"),
             "the API client is configured with {v}", "The API client is configured with {v}",
             "{who} is configured with {v}"),
    FactType("loglevel", "agentic", "the service's log level", "log level",
             ("INFO", "DEBUG", "WARN", "ERROR", "TRACE"),
             "the service logs at {v} level", "The service logs at {v} level", "{who} logs at {v} level"),
    FactType("region", "agentic", "the primary deployment region", "deployment region",
             ("us-east-1", "eu-west-1", "ap-southeast-2", "us-west-2", "eu-central-1"),
             "production runs in {v}", "Production runs in {v}", "{who} runs in {v}"),
    FactType("python", "agentic", "the project's Python version", "Python version",
             ("Python 3.9", "Python 3.11", "Python 3.12", "Python 3.13", "PyPy 3.10"),
             "the project targets {v}", "The project targets {v}", "{who} targets {v}"),
    FactType("cachettl", "agentic", "the cache TTL", "cache TTL",
             ("5 minutes", "15 minutes", "1 hour", "30 minutes", "24 hours"),
             "the cache TTL is set to {v}", "The cache TTL is set to {v}", "{who} caches for {v}"),
)  # fmt: skip

NAMES = (
    "Alex", "Maya", "Ben", "Chloe", "Dev", "Erin", "Farid", "Gina", "Hugo", "Ines",
    "Jon", "Kira", "Leo", "Mina", "Noor", "Omar", "Pia", "Raj", "Sara", "Theo",
)  # fmt: skip


def sentence(text: str) -> str:
    """``text`` with a capital first letter and a full stop."""
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "?", "!")) else ".")
