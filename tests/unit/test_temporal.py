"""Dates named in key phrases (hrt/pipeline/temporal.py)."""

from datetime import UTC, datetime

import pytest

from hrt.pipeline.temporal import DAY_SLACK_S, in_any, phrase_windows, windows_in


def ts(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("phrase", "text", "start", "end"),
    [
        ("What did John do the week before August 3, 2023?", "August 3, 2023", ts(2023, 8, 3), ts(2023, 8, 4)),
        ("the party on 25 February, 2022", "25 February, 2022", ts(2022, 2, 25), ts(2022, 2, 26)),
        ("the 3rd of Aug. 2023", "3rd of Aug. 2023", ts(2023, 8, 3), ts(2023, 8, 4)),
        ("Sept 5, 2021", "Sept 5, 2021", ts(2021, 9, 5), ts(2021, 9, 6)),
        ("Maria's job in August 2023", "August 2023", ts(2023, 8, 1), ts(2023, 9, 1)),
        ("in December 2022", "December 2022", ts(2022, 12, 1), ts(2023, 1, 1)),
        ("trips in 2022", "in 2022", ts(2022, 1, 1), ts(2023, 1, 1)),
    ],
)
def test_dates_with_a_year_become_windows_with_a_day_of_slack(phrase, text, start, end):
    (w,) = windows_in(phrase)
    assert (w.phrase, w.text) == (phrase, text)
    assert (w.start, w.end) == (start - DAY_SLACK_S, end + DAY_SLACK_S)


@pytest.mark.parametrize(
    "phrase",
    ["What did Melanie do in May?", "last week", "yesterday", "February 30, 2023", "2023 was long", "Caroline"],
)
def test_no_year_relative_dates_and_impossible_days_name_no_window(phrase):
    assert windows_in(phrase) == []


def test_windows_over_phrases_in_order_without_repeats():
    ws = phrase_windows(["On May 25, 2023 and in 2022", "May 25, 2023", "nothing"])
    assert [w.text for w in ws] == ["May 25, 2023", "in 2022"]
    assert in_any(ts(2023, 5, 25, 12), ws) and in_any(ts(2022, 7, 1), ws)
    assert not in_any(ts(2021, 7, 1), ws) and not in_any(None, ws)
