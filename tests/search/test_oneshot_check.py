"""The one-shot check's choice among theta's most probable networks (search.rerank_by)."""

import numpy as np
import pytest

from fbnas.search.oneshot_check import choose, log_probabilities


def test_tied_macs_share_their_places_and_leave_the_choice_to_top1():
    # MACs 5, 5, 1, 7: ranks 2.5, 2.5, 1, 4; top-1 ranks 4, 3, 2, 1: sums 6.5, 5.5, 3, 5
    assert choose("top1_and_macs", top1=[50.0, 49.0, 48.0, 47.0], macs=[5e6, 5e6, 1e6, 7e6]) == 0
    # swap the MACs of the first two: still tied, so still the better top-1
    assert choose("top1_and_macs", top1=[49.0, 50.0, 48.0, 47.0], macs=[5e6, 5e6, 1e6, 7e6]) == 1


def test_top1_keeps_the_best_one_shot_score_ties_to_the_more_probable():
    assert choose("top1", top1=[40.0, 45.0, 42.0], macs=[1, 1, 9]) == 1
    assert choose("top1", top1=[45.0, 40.0, 45.0], macs=[1, 1, 9]) == 0


def test_macs_move_the_choice_between_near_equal_one_shot_scores():
    # one-shot 45.0 against 44.8: within any val split's noise; the second has far more MACs
    top1, macs = [45.0, 44.8, 30.0], [10e6, 40e6, 20e6]
    assert choose("top1", top1=top1, macs=macs) == 0
    assert choose("top1_and_macs", top1=top1, macs=macs) == 1


def test_many_macs_cannot_carry_the_worst_one_shot_network():
    # the most MACs with the worst one-shot score: rank sum 1 + 4, against 4 + 3 for the best
    top1, macs = [50.0, 48.0, 46.0, 20.0], [30e6, 20e6, 10e6, 90e6]
    assert choose("top1_and_macs", top1=top1, macs=macs) == 0


def test_equal_rank_sums_go_to_the_better_one_shot_then_the_more_probable():
    assert choose("top1_and_macs", top1=[40.0, 45.0], macs=[20e6, 10e6]) == 1
    assert choose("top1_and_macs", top1=[45.0, 45.0], macs=[10e6, 10e6]) == 0


def test_an_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="rule"):
        choose("macs", top1=[1.0], macs=[1.0])


def test_naswot_keeps_the_best_training_free_score_ties_to_the_more_probable():
    assert choose("naswot", naswot=[310.0, 325.5, 301.0]) == 1
    assert choose("naswot", naswot=[325.5, 310.0, 325.5]) == 0


def test_naswot_ignores_one_shot_scores_and_macs():
    assert choose("naswot", naswot=[1.0, 2.0], top1=[90.0, 10.0], macs=[9e9, 1.0]) == 1


def test_naswot_and_top1_sums_both_ranks_ties_to_the_better_naswot_score():
    # NASWOT alone keeps the last, one-shot alone the first; the second is good by both
    naswot, top1 = [300.0, 315.0, 310.0, 320.0], [50.0, 48.0, 45.0, 30.0]
    assert choose("naswot", naswot=naswot) == 3 and choose("top1", top1=top1) == 0
    assert choose("naswot_and_top1", naswot=naswot, top1=top1) == 1
    # equal rank sums (2 + 1 against 1 + 2): the better NASWOT score wins
    assert choose("naswot_and_top1", naswot=[300.0, 310.0], top1=[50.0, 40.0]) == 1


def test_naswot_and_theta_lets_theta_veto_a_network_the_search_made_unlikely():
    # NASWOT alone keeps the last network by a hair; theta gave it a far lower probability
    naswot, theta = [300.0, 310.0, 320.0, 321.0], [-1.0, -2.0, -3.0, -20.0]
    assert choose("naswot", naswot=naswot) == 3
    assert choose("naswot_and_theta", naswot=naswot, theta=theta) == 2
    # ...but a quarter of theta's z-score does not outweigh a clear NASWOT lead
    assert choose("naswot_and_theta", naswot=[300.0, 301.0, 302.0, 340.0], theta=theta) == 3


def test_naswot_and_theta_with_equal_figures_keeps_the_more_probable():
    assert choose("naswot_and_theta", naswot=[5.0, 5.0], theta=[-1.0, -1.0]) == 0


def test_log_probabilities_sum_each_layers_log_probability_of_the_network():
    from fbnas.arch.space import load_space

    space = load_space("nasbench_macro")
    probs = [np.array([0.2, 0.3, 0.5])] * len(space.layers)
    ops = [layer.candidates[i % 3] for i, layer in enumerate(space.layers)]
    expected = sum(np.log([0.2, 0.3, 0.5][i % 3]) for i in range(len(space.layers)))
    assert log_probabilities(space, probs, [ops]) == pytest.approx([expected])


def test_the_config_knows_which_rules_score_one_shot():
    from fbnas.check_rules import ONE_SHOT_RULES
    from fbnas.search.oneshot_check import RULES, SHORTLISTED, needs

    # a rule that scores only a shortlist one-shot may check as many networks as NASWOT can
    assert set(ONE_SHOT_RULES) == {rule for rule in RULES
                                   if needs(rule, "top1") and rule not in SHORTLISTED}


def test_the_rules_are_defined_once_and_pick_takes_those_without_a_supernet():
    import dataclasses

    from fbnas.config import SearchConfig
    from fbnas.check_rules import PICK_RULES, RERANK_RULES
    from fbnas.search.oneshot_check import RULES, needs

    field = {f.name: f for f in dataclasses.fields(SearchConfig)}["rerank_by"]
    assert RULES is RERANK_RULES
    assert field.metadata["choices"] == tuple(RERANK_RULES)
    assert PICK_RULES[0] == "naswot_and_theta"  # fbnas pick's default
    assert set(PICK_RULES) == {rule for rule in RULES if not needs(rule, "top1")}


def test_then_top1_lets_one_shot_reorder_the_long_checks_best_8_only():
    from fbnas.search.oneshot_check import shortlist

    rule = "naswot_and_theta_then_top1"
    # 10 networks, equally probable: NASWOT puts 0 to 7 in front, 8 and 9 are never scored
    naswot, theta = [320.0, 319, 318, 317, 316, 315, 314, 313, 300, 299], [-1.0] * 10
    assert shortlist(rule, 10, naswot=naswot, theta=theta) == list(range(8))
    assert shortlist("top1", 10) == list(range(10))  # other rules score every network
    # rank sums all 9 (score ranks 8..1, top-1 ranks 1..8): a tie, to the better score
    top1 = [40.0, 41, 42, 43, 44, 45, 46, 47, None, None]
    assert choose(rule, naswot=naswot, theta=theta, top1=top1) == 0
    # a clear one-shot lead inside the shortlist moves the choice: 3 sums 5 + 8
    top1[3] = 60.0
    assert choose(rule, naswot=naswot, theta=theta, top1=top1) == 3
    # theta shapes the shortlist as it weighs naswot_and_theta: at near-equal NASWOT scores
    # the likelier network 8 takes 7's place
    naswot[8], theta[8] = 312.9, 5.0
    assert sorted(shortlist(rule, 10, naswot=naswot, theta=theta)) == [0, 1, 2, 3, 4, 5, 6, 8]


def test_then_one_shot_weighs_one_shot_like_naswot_within_the_best_16():
    from fbnas.search.oneshot_check import shortlist

    rule = "naswot_and_theta_then_one_shot"
    # 20 equally probable networks, NASWOT falling by 1 a place: 16 and on are never scored
    naswot, theta = [float(320 - i) for i in range(20)], [-1.0] * 20
    assert shortlist(rule, 20, naswot=naswot, theta=theta) == list(range(16))
    top1 = [50.0] * 16 + [None] * 4
    assert choose(rule, naswot=naswot, theta=theta, top1=top1) == 0  # one-shot silent
    # a one-shot lead as wide as NASWOT's spread within the shortlist outweighs 5 places of
    # NASWOT (z-scores within the 16: one-shot's jumps by ~3.9, NASWOT's falls by ~1.1)
    top1[5] = 60.0
    assert choose(rule, naswot=naswot, theta=theta, top1=top1) == 5
    # a network left off the shortlist cannot win, however well it would score one-shot
    top1[17] = 99.0
    assert choose(rule, naswot=naswot, theta=theta, top1=top1) == 5
    # theta weighs in within the shortlist: equal NASWOT and one-shot go to the likelier
    naswot, top1 = [300.0] * 20, [50.0] * 16 + [None] * 4
    theta = [-1.0] * 20
    theta[9] = -0.5
    assert choose(rule, naswot=naswot, theta=theta, top1=top1) == 9


def test_depth_first_orders_by_depth_and_then_by_score_whatever_the_scores_spread():
    from fbnas.search.oneshot_check import depth_first

    # a score far ahead never lifts a shallower network over a deeper one
    order = depth_first([2, 3, 3, 2], [900.0, -5.0, -4.0, 1e6])
    assert sorted(range(4), key=lambda i: -order[i]) == [2, 1, 3, 0]
    assert depth_first([], []) == []


def test_deepest_rules_let_only_the_shortlists_fewest_skip_networks_compete():
    from fbnas.search.oneshot_check import depths

    assert depths([["skip", "k3_e3", "skip"], ["k3_e3", "k5_e6", "k3_e3"]]) == [1, 3]
    # 20 equally probable networks, NASWOT falling by 1 a place: the shortlist is 0 to 15
    naswot, theta = [float(320 - i) for i in range(20)], [-1.0] * 20
    depth = [6] * 20
    depth[9] = depth[12] = 7  # the shortlist's deepest
    depth[18] = 8  # deeper, but off the shortlist
    top1 = [50.0] * 16 + [None] * 4
    # one-shot and NASWOT favour network 0, but only 9 and 12 compete: 9, the better NASWOT
    assert choose("naswot_and_theta_then_one_shot", naswot=naswot, theta=theta,
                  top1=top1, depth=depth) == 0
    rule = "naswot_and_theta_deepest_then_one_shot"
    assert choose(rule, naswot=naswot, theta=theta, top1=top1, depth=depth) == 9
    # among the deepest, one-shot weighs as in naswot_and_theta_then_one_shot
    top1[12] = 60.0
    assert choose(rule, naswot=naswot, theta=theta, top1=top1, depth=depth) == 12
    # the training-free variant keeps the shortlist's order among its deepest
    assert choose("naswot_and_theta_deepest", naswot=naswot, theta=theta, depth=depth) == 9
    # with equal depths the deepest rule is its shortlisted rule
    flat = [6] * 20
    assert (choose(rule, naswot=naswot, theta=theta, top1=top1, depth=flat)
            == choose("naswot_and_theta_then_one_shot", naswot=naswot, theta=theta, top1=top1))


def test_early_depth_counts_skips_only_where_the_input_is_larger_than_the_final_resolution():
    from fbnas.arch.space import load_space
    from fbnas.search.oneshot_check import depth_figures, early_layers

    space = load_space("nasbench_macro")  # 32x32 in, three stride-2 stages: 4x4 at the end
    # layer 6 (the 6th, stride 2) brings 8x8 to 4x4; the 7th and 8th run at 4x4
    assert early_layers(space) == {0, 1, 2, 3, 4, 5}
    wide = ["k5_e6"] * 6 + ["skip", "skip"]  # two skips at the final resolution
    narrow = ["k3_e3"] * 8
    shallow = ["k5_e6", "skip", "k5_e6", "skip", "k5_e6", "k5_e6", "k5_e6", "k5_e6"]
    figures = depth_figures(space, [wide, narrow, shallow])
    assert figures == {"depth": [6, 8, 6], "early_depth": [6, 6, 4]}
    # the early rule lets the wide network compete beside the narrow one and keeps it on its
    # better scores; the plain deepest rule lets only the narrow one compete
    naswot, theta, top1 = [2.0, 1.0, 3.0], [-1.0, -1.0, -1.0], [50.0, 45.0, 55.0]
    assert choose("naswot_and_theta_early_deepest_then_one_shot", naswot=naswot, theta=theta,
                  top1=top1, **figures) == 0
    assert choose("naswot_and_theta_deepest_then_one_shot", naswot=naswot, theta=theta,
                  top1=top1, **figures) == 1


def test_depth_filter_moved_says_whether_the_fewest_skip_filter_changed_the_decision():
    from fbnas.search.oneshot_check import depth_filter_moved

    naswot, theta = [float(320 - i) for i in range(20)], [-1.0] * 20
    top1 = [50.0] * 16 + [None] * 4
    rule = "naswot_and_theta_deepest_then_one_shot"
    deeper_nine = [6] * 20
    deeper_nine[9] = 7  # the filter turns the decision from 0 to 9
    assert depth_filter_moved(rule, naswot=naswot, theta=theta, top1=top1, depth=deeper_nine)
    deeper_first = [6] * 20
    deeper_first[0] = 7  # the best network is the deepest too: the filter changes nothing
    assert not depth_filter_moved(rule, naswot=naswot, theta=theta, top1=top1,
                                  depth=deeper_first)
    # a rule without the filter has nothing to say
    assert depth_filter_moved("naswot_and_theta_then_one_shot", naswot=naswot, theta=theta,
                              top1=top1) is None
