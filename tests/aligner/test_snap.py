"""offer_snap's rules (upstream's offer_snap.py behaviour), including its authoritative refusals."""

from __future__ import annotations

from mycelium.engines.aligner.snap import snap, snap_offer

GRID = ["20", "25", "30", "35", "40"]


def test_exact_then_case_then_normalised():
    assert snap("acme", ["acme", "globex"]) == "acme"
    assert snap("ACME", ["acme", "globex"]) == "acme"
    assert snap("next-day  delivery", ["next_day_delivery", "standard"]) == "next_day_delivery"


def test_a_number_snaps_to_the_nearest_grid_point_within_one_step():
    assert snap("28", GRID) == "30"
    assert snap("32%", GRID) == "30"
    assert snap("41", GRID) == "40"  # just outside the range, within a step
    assert snap("20.0", GRID) == "20"


def test_numeric_refusals_are_authoritative():
    assert snap("1000", GRID) is None  # off the grid
    assert snap("30", ["25", "35"]) is None  # an exact tie: a discovery gap, not a snap
    assert snap("14", GRID) is None  # more than a step below
    # never handed to the string rules: "100" is 80 % like "10" by difflib, and still refused
    assert snap("100", ["10", "11"]) is None


def test_token_containment_either_way_and_fuzzy_at_80():
    assert snap("express delivery", ["express", "standard"]) == "express"
    assert snap("acme", ["acme corp", "globex inc"]) == "acme corp"
    assert snap("globx", ["acme", "globex"]) == "globex"  # ratio 90.9
    assert snap("initech", ["acme", "globex"]) is None


def test_an_offer_is_all_or_nothing_with_its_keys_snapped_too():
    issues = {"price": GRID, "vendor": ["acme", "globex"]}
    assert snap_offer({"Price": "28", "VENDOR": "Acme"}, issues) == {"price": "30", "vendor": "acme"}
    assert snap_offer({"price": "28"}, issues) is None  # an issue missing
    assert snap_offer({"price": "1000", "vendor": "acme"}, issues) is None  # one value refused
    assert snap_offer("price=20", issues) is None  # not an offer at all
