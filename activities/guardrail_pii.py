"""Personal data in a text, by Presidio's analyzer with its English pattern recognizers
only (no spaCy model, nothing downloaded): a card number must pass the Luhn check, an
IBAN its check digits. Presidio is the `guardrails` extra; only a worker whose runs have
a `pii` guardrail loads this module (`activities.guardrail_checks`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

import tldextract
from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
from presidio_analyzer.nlp_engine import NlpArtifacts, NlpEngine
from presidio_analyzer.predefined_recognizers import EmailRecognizer

from tarry.contracts.guardrails import GuardrailMatch, PiiKind

__all__ = ["find_pii"]

_PRESIDIO_ENTITIES = {
    PiiKind.EMAIL: "EMAIL_ADDRESS",
    PiiKind.PHONE: "PHONE_NUMBER",
    PiiKind.CARD: "CREDIT_CARD",
    PiiKind.IBAN: "IBAN_CODE",
    PiiKind.IP: "IP_ADDRESS",
    PiiKind.SSN: "US_SSN",
}
_KIND_OF = {entity: kind for kind, entity in _PRESIDIO_ENTITIES.items()}
_MIN_SCORE = 0.4
"""Presidio's confidence below which a match is not one: its phone recognizer scores a
number it parsed 0.4, its weakest patterns (a bare 9-digit number as an SSN) less."""


def find_pii(text: str, kinds: frozenset[PiiKind]) -> list[GuardrailMatch]:
    """The personal data of `kinds` in `text`, as Presidio finds it."""
    results = _analyzer().analyze(
        text, language="en", entities=[_PRESIDIO_ENTITIES[k] for k in kinds]
    )
    return [
        GuardrailMatch(kind=_KIND_OF[r.entity_type], start=r.start, end=r.end)
        for r in results
        if r.score >= _MIN_SCORE and r.entity_type in _KIND_OF
    ]


class _NoNlp(NlpEngine):
    """No tokens, lemmas or named entities: the pattern recognizers need none."""

    def load(self) -> None: ...

    def is_loaded(self) -> bool:
        return True

    def process_text(self, text: str, language: str) -> NlpArtifacts:
        return NlpArtifacts([], [], [], [], self, language)  # type: ignore[arg-type]

    def process_batch(
        self,
        texts: Iterable[str],
        language: str,
        batch_size: int = 1,
        n_process: int = 1,
        **kwargs: Any,
    ) -> Iterator[tuple[str, NlpArtifacts]]:
        return ((text, self.process_text(text, language)) for text in texts)

    def is_stopword(self, word: str, language: str) -> bool:
        return False

    def is_punct(self, word: str, language: str) -> bool:
        return False

    def get_supported_entities(self) -> list[str]:
        return []

    def get_supported_languages(self) -> list[str]:
        return ["en"]


class _OfflineEmail(EmailRecognizer):
    """Presidio's email recognizer, whose domain check (`tldextract`) would fetch the
    public suffix list from the internet: the snapshot tldextract ships is enough."""

    _domains = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    def validate_result(self, pattern_text: str) -> bool:
        return bool(self._domains(pattern_text).fqdn != "")


@functools.cache
def _analyzer() -> AnalyzerEngine:
    """Built once per worker process: loading the recognizers takes about a second."""
    registry = RecognizerRegistry()
    registry.load_predefined_recognizers(languages=["en"])
    registry.remove_recognizer("EmailRecognizer")
    registry.add_recognizer(_OfflineEmail())
    return AnalyzerEngine(registry=registry, nlp_engine=_NoNlp(), supported_languages=["en"])
