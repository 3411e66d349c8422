"""The pure parts of job lists: cursors and the growth of the time windows a page is read in."""

from __future__ import annotations

import pytest

from shared.db.lists.paging import MAX_GROWTH, Cursor, CursorError, next_window


def test_a_cursor_round_trips_and_is_url_safe() -> None:
    cursor = Cursor(1_790_000_000_123, "alice~train~3f9a2c1b")
    text = cursor.encode()
    assert Cursor.decode(text) == cursor
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


@pytest.mark.parametrize("text", ["", "!!!", "bm90IGpzb24", "WzEsMl0", "WyJ4IiwiYSJd", "W3RydWUsImEiXQ"])
def test_a_cursor_not_made_here_is_refused_with_a_message(text: str) -> None:
    # not base64; not JSON; [1, 2]; ["x", "a"]; [true, "a"]
    with pytest.raises(CursorError, match="cursor: not a cursor this server gave out"):
        Cursor.decode(text)


@pytest.mark.parametrize(("span", "covered", "found", "needed", "expect"), [
    (60_000, 60_000, 0, 21, 240_000),  # nothing yet: four times wider
    (60_000, 60_000, 10, 11, 120_000),  # the estimate (~82 s) is under double: double
    (60_000, 60_000, 1, 1000, 60_000 * MAX_GROWTH),  # sparse: the estimate is capped
    (600_000, 1_200_000, 100, 100, 1_500_001),  # 100 per 1.2 M ms, 100 more: 1.5 M ms (with margin)
])
def test_windows_grow_from_the_density_seen(span: int, covered: int, found: int, needed: int, expect: int) -> None:
    assert next_window(span, covered, found, needed) == expect
