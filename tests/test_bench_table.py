"""The benchmark harness's pure parts (the numbers it reports and the table it writes), so that
`make bench` cannot rot silently between the runs nobody makes in the test suite."""

from __future__ import annotations

import math
import statistics

import pytest

from bench.table import Row, Target, median_of_round_ratios, percentile, render


def test_percentile_is_the_nearest_observed_rank() -> None:
    samples = [float(value) for value in range(1, 101)]
    assert percentile(samples, 0.99) == 99.0
    assert percentile(samples, 0.5) == 50.0
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([3.0, 1.0, 2.0], 1.0) == 3.0


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_ratio_is_the_median_of_per_round_ratios_not_the_ratio_of_medians() -> None:
    ours = [10.0, 20.0, 30.0]
    peer = [5.0, 40.0, 15.0]  # per round: ×2, ×0.5, ×2
    assert median_of_round_ratios(ours, peer) == 2.0
    # The ratio of the medians (20 / 15) would let one noisy peer round move the figure.
    assert statistics.median(ours) / statistics.median(peer) != 2.0


def test_a_round_without_a_figure_is_left_out_of_the_ratio() -> None:
    assert median_of_round_ratios([10.0, 30.0, 8.0], [5.0, math.nan, 4.0]) == 2.0
    with pytest.raises(ValueError):
        median_of_round_ratios([1.0], [math.nan])


def test_a_row_with_no_figure_never_holds() -> None:
    row = Row("session", "ms", ours=[math.nan], target=Target("abs_le", 3))
    assert row.holds() is False
    assert "no figure" in render([row])


def test_spread_is_the_lowest_and_highest_round_ratio() -> None:
    row = Row("x", "ms", ours=[8.0, 12.0, 10.0, 6.0], peers={"p": [4.0, 4.0, 5.0, math.nan]})
    row.against = "p"
    assert row.spread() == (2.0, 3.0)
    assert Row("x", "ms", ours=[1.0]).spread() is None


def test_ratio_needs_one_value_per_round_on_each_side() -> None:
    with pytest.raises(ValueError):
        median_of_round_ratios([1.0, 2.0], [1.0])


@pytest.mark.parametrize(
    ("target", "ours", "ratio", "holds"),
    [
        (Target("ratio_le", 1.0), 5.0, 0.9, True),
        (Target("ratio_le", 1.0), 5.0, 1.1, False),
        (Target("ratio_ge", 0.4), 5.0, 0.4, True),
        (Target("ratio_ge", 0.4), 5.0, 0.39, False),
        (Target("abs_le", 1.5), 1.5, None, True),
        (Target("abs_le", 1.5), 1.6, 0.1, False),
        # No peer figure: a ratio target cannot be claimed.
        (Target("ratio_le", 1.0), 0.1, None, False),
    ],
)
def test_target_holds(target: Target, ours: float, ratio: float | None, holds: bool) -> None:
    assert target.holds(ours, ratio) is holds


def test_render_writes_medians_ratio_target_and_verdict() -> None:
    row = Row(
        "foreground `echo hi`, median",
        "ms",
        ours=[8.0, 12.0, 10.0],  # per round ×2, ×3, ×2 against SWE-ReX
        peers={"SWE-ReX": [4.0, 4.0, 5.0], "minimal app": [3.0, 3.5, 4.0]},
        against="SWE-ReX",
        target=Target("ratio_le", 1.0),
        notes={"shellgate": "p99 20.00"},
    )
    free_row = Row("idle RSS", "MiB", ours=[60.0], target=Target("abs_le", 64))
    table = render([row, free_row]).splitlines()
    assert table[0] == "| work | shellgate | peers | ratio | target | holds |"
    assert table[2] == (
        "| foreground `echo hi`, median | 10.0 ms (p99 20.00) | SWE-ReX 4.00 ms; "
        "minimal app 3.50 ms | ×2.00 SWE-ReX (×2.00–3.00) | ≤ ×1 SWE-ReX | no |"
    )
    assert table[3] == "| idle RSS | 60.0 MiB | — | — | ≤ 64 | yes |"
