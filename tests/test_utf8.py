import pytest

from app.core.utf8 import ceil_boundary, floor_boundary, incomplete_tail

EURO = "€".encode()  # three bytes: a lead and two continuations


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"abc", 0),
        ("é".encode()[:1], 1),
        ("€".encode()[:2], 2),
        ("𝄞".encode()[:3], 3),
        ("𝄞".encode(), 0),
        (b"\x80\x80\x80", 0),
        (b"a\xff", 0),
    ],
)
def test_incomplete_tail_counts_the_bytes_of_a_character_cut_at_the_end(
    data: bytes, expected: int
) -> None:
    assert incomplete_tail(data) == expected


def test_floor_boundary_moves_back_to_the_lead_byte() -> None:
    data = b"a" + EURO + b"b"
    assert [floor_boundary(data, index) for index in range(len(data))] == [0, 1, 1, 1, 4]


def test_floor_boundary_stops_at_its_lowest_index() -> None:
    data = b"a" + EURO
    assert floor_boundary(data, 3, lowest=2) == 2


def test_ceil_boundary_moves_forward_past_continuation_bytes() -> None:
    data = b"a" + EURO + b"b"
    assert [ceil_boundary(data, index) for index in range(len(data) + 1)] == [0, 1, 4, 4, 4, 5]
