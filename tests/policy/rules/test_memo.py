"""``Probation``: a memory of responses is asked while they repeat, and rests while they do not."""

from __future__ import annotations

from proxy.policy.rules.match_memory import MatchMemory
from proxy.policy.rules.memo import PROBE, RATIO, REST, Probation


def _score(probation: Probation, hits: int, misses: int) -> None:
    for _ in range(hits):
        assert probation.worth()
        probation.hit()
    for _ in range(misses):
        assert probation.worth()
        probation.miss()


def test_a_memory_that_never_hits_rests_then_is_tried_again() -> None:
    """PROBE misses in a row: the next REST look-ups skip the memory, the one after asks it."""
    probation = Probation()
    _score(probation, 0, PROBE)
    assert [probation.worth() for _ in range(REST)] == [False] * REST
    assert probation.worth()


def test_one_hit_in_ratio_keeps_a_memory_asked() -> None:
    """A hit rate of one in RATIO (the bar) keeps the memory asked round after round."""
    probation = Probation()
    hits = -(-PROBE // RATIO)  # the fewest hits that reach the bar in a round
    for _ in range(5):
        _score(probation, hits, PROBE - hits)
    assert probation.worth()
    assert probation.resting == 0


def test_too_few_hits_rest_the_memory() -> None:
    """One hit fewer than the bar in a round of PROBE look-ups: the memory rests."""
    probation = Probation()
    hits = -(-PROBE // RATIO) - 1
    _score(probation, hits, PROBE - hits)
    assert not probation.worth()


def test_a_route_keeps_score_per_status() -> None:
    """500s that never repeat rest the match memory for 500s only: 422s are still asked."""
    memory = MatchMemory((), ())
    _score(memory.probation(500), 0, PROBE)
    assert not memory.probation(500).worth()
    assert memory.probation(422).worth()
