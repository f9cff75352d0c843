"""The backend registry: one class per name, as the policy registry."""

from __future__ import annotations

import pytest

from jitsched.agents.backends.base import BACKENDS, Backend, register_backend
from jitsched.agents.backends.record import RecordBackend


class _Noop(Backend):
    def apply(self, flows, leftover_Bps) -> None:
        pass


def test_register_backend_refuses_a_second_class_under_a_taken_name():
    taken = type("OtherRecord", (_Noop,), {"name": "record"})
    with pytest.raises(ValueError, match="backend 'record' registered twice"):
        register_backend(taken)
    assert BACKENDS["record"] is RecordBackend


def test_register_backend_accepts_the_same_class_again_and_refuses_no_name():
    assert register_backend(RecordBackend) is RecordBackend  # idempotent, e.g. a module reloaded
    assert BACKENDS["record"] is RecordBackend
    with pytest.raises(ValueError, match="has no name"):
        register_backend(_Noop)
    assert "" not in BACKENDS
