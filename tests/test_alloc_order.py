"""priority_greedy's order must be a permutation of the flow indices (checked by counting)."""

from __future__ import annotations

import numpy as np
import pytest

from jitsched.errors import ValidationError
from jitsched.plan.alloc import priority_greedy

SRC, DST, CAP = np.array([0, 1, 2]), np.array([1, 2, 0]), np.ones(3)


def test_a_permutation_is_served_in_its_order():
    # flow 2 (2 -> 1) goes first and takes host 1's ingress, which flow 0 (0 -> 1) needs too
    np.testing.assert_allclose(priority_greedy([2, 0, 1], SRC, [1, 2, 1], CAP, CAP), [0.0, 1.0, 1.0])


@pytest.mark.parametrize("order", [[0, 0, 1], [0, 1, 3], [-1, 0, 1], [0, 1], [2, 2, 2]])
def test_anything_else_is_refused(order):
    with pytest.raises(ValidationError, match="permutation"):
        priority_greedy(order, SRC, DST, CAP, CAP)
