import pytest

from gpucourse import validate
from gpucourse.errors import InvalidConfig


@pytest.mark.parametrize("bad, words", [
    (0, "from 1 to 1024"), (1025, "from 1 to 1024"), (32.0, "must be an integer"), ("32", "must be an integer"),
    ((32, 32, 2), "at most 1024 threads"), ((1, 1, 65), "from 1 to 64"), (True, "must be an integer"),
    ((), "tuple of 1 to 3"),
])
def test_bad_block_sizes_say_what_is_allowed(bad, words):
    with pytest.raises(InvalidConfig, match=words):
        validate.block(bad)


def test_good_block_sizes_normalise_to_three_dimensions():
    assert validate.block(256) == (256, 1, 1)
    assert validate.block((16, 16)) == (16, 16, 1)
    assert validate.block((8, 8, 16)) == (8, 8, 16)


def test_sizes_and_numbers():
    with pytest.raises(InvalidConfig, match="≥ 0"):
        validate.integer("size", -1, minimum=0)
    with pytest.raises(InvalidConfig, match="from 0.0 to 1.0"):
        validate.number("fraction", 1.5, minimum=0.0, maximum=1.0)
    with pytest.raises(InvalidConfig, match="must be a number"):
        validate.number("fraction", float("nan"))
    with pytest.raises(InvalidConfig, match="one of 'a', 'b'"):
        validate.choice("placement", "c", ["a", "b"])
    with pytest.raises(InvalidConfig, match="GiB free"):
        validate.fits_in_memory(10 * 2**30, 2**30, "the arrays")
    validate.fits_in_memory(10 * 2**30, None)  # simulator: host memory is the limit
