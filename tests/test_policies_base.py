"""Tests of the policy base: the registry's roles (each declared once where it must be, the helpers' order) and SlotSchedule's pickling."""

import numpy as np
import pytest

from jitsched.policies import (
    POLICIES,
    ROLES,
    Allocation,
    Policy,
    baseline_policies,
    default_policy,
    paper_policy,
    policies_with_role,
    reference_policy,
    register_policy,
)
from jitsched.policies import base as policies_base


class _Stub(Policy):
    def allocate(self, view):
        return Allocation(view.flows.remaining * 0.0)


def _stub(name: str, role: str, role_rank: int = 0) -> type[Policy]:
    return type(f"Stub_{name}", (_Stub,), {"name": name, "role": role, "role_rank": role_rank})


def test_every_registered_role_is_known():
    assert {cls.role for cls in POLICIES.values()} <= {"", *ROLES}


@pytest.mark.parametrize("role, count", [("reference", 1), ("default", 1)])
def test_exactly_one_reference_and_one_default(role, count):
    assert len(policies_with_role(role)) == count


def test_at_most_one_paper_policy():
    assert len(policies_with_role("paper")) <= 1


def test_helpers_name_the_expected_policies_in_order():
    assert reference_policy() == "tensorflow"
    assert baseline_policies() == ("tictac", "sincronia", "varys")
    assert default_policy() == "jit"
    assert paper_policy() == "jit-paper"
    assert policies_with_role(*ROLES) == ("tensorflow", "tictac", "sincronia", "varys", "jit", "jit-paper")
    # roles in the order asked, not ROLES' order
    assert policies_with_role("default", "reference") == ("jit", "tensorflow")
    assert policies_with_role() == ()


def test_a_policy_without_role_is_in_no_comparison():
    assert POLICIES["fifo"].role == ""
    assert "fifo" not in policies_with_role(*ROLES)


def test_order_does_not_depend_on_registration_order(monkeypatch):
    expected = policies_with_role(*ROLES)
    monkeypatch.setattr(policies_base, "POLICIES", dict(reversed(list(POLICIES.items()))))
    assert policies_with_role(*ROLES) == expected


def test_order_within_a_role_is_by_rank_then_name(monkeypatch):
    monkeypatch.setitem(POLICIES, "a-late", _stub("a-late", "baseline", role_rank=2))
    monkeypatch.setitem(POLICIES, "z-early", _stub("z-early", "baseline", role_rank=-1))
    monkeypatch.setitem(POLICIES, "b-tie", _stub("b-tie", "baseline"))
    # a-late ties with varys (rank 2): by name
    assert baseline_policies() == ("z-early", "b-tie", "tictac", "sincronia", "a-late", "varys")


@pytest.mark.parametrize("role, helper", [("reference", reference_policy), ("default", default_policy),
                                          ("paper", paper_policy)])
def test_a_duplicated_sole_role_is_refused(monkeypatch, role, helper):
    monkeypatch.setitem(POLICIES, "second", _stub("second", role))
    with pytest.raises(LookupError, match=f"one {role} policy, registered: .*second"):
        helper()


@pytest.mark.parametrize("role, helper", [("reference", reference_policy), ("default", default_policy)])
def test_a_missing_required_role_is_refused(monkeypatch, role, helper):
    monkeypatch.delitem(POLICIES, helper())
    with pytest.raises(LookupError, match=f"exactly one {role} policy, registered: none"):
        helper()


def test_a_missing_paper_policy_is_none(monkeypatch):
    monkeypatch.delitem(POLICIES, "jit-paper")
    assert paper_policy() is None


def test_unknown_roles_are_refused():
    with pytest.raises(ValueError, match="unknown role 'referense'"):
        register_policy(_stub("typo", "referense"))
    assert "typo" not in POLICIES
    with pytest.raises(ValueError, match="unknown role 'baselines'"):
        policies_with_role("baseline", "baselines")


def test_a_variant_declares_its_own_role():
    # jit-paper subclasses jit: inheriting "default" would make two defaults
    assert issubclass(POLICIES["jit-paper"], POLICIES["jit"])
    assert POLICIES["jit-paper"].role == "paper"


# ---------------------------------------------------------------- the registry's users

# PAPER's tables keyed by policy name, and those keyed otherwise (a new table must be
# put in one, so that its names are checked or knowingly not)
PAPER_BY_POLICY = ("speedup", "waiting_time_s", "remaining_bw", "background_slowdown")
PAPER_NOT_BY_POLICY = ("alpha_sweep",)


def test_bench_paper_compares_the_roles():
    from jitsched.bench.paper import spec

    assert spec.REFERENCE == reference_policy()
    assert spec.POLICIES == (reference_policy(), *baseline_policies(), default_policy())
    assert spec.BASELINES == (reference_policy(), *baseline_policies())
    assert spec.PAPER_POLICY == paper_policy()


def test_every_policy_named_in_bench_paper_spec_is_registered():
    # per-policy data (the paper's figures, run costs, jit's own options) names policies
    # by name: a renamed or removed policy must fail here, not drop out of the tables
    from jitsched.bench.paper import spec

    assert {t for t, v in spec.PAPER.items() if isinstance(v, dict)} == {*PAPER_BY_POLICY,
                                                                           *PAPER_NOT_BY_POLICY}
    names = {spec.JIT, spec.PARETO_KNOB[0], *spec.COST}
    for table in PAPER_BY_POLICY:
        # background_slowdown also holds jit's figures by file size
        names |= {k for k in spec.PAPER[table] if not k.endswith("_by_size_gbit")}
    assert names - set(POLICIES) == set()
    assert set(spec.COST) <= set(spec.POLICIES)


def test_testbed_runs_registered_policies():
    from jitsched.testbed.options import DAEMON_POLICY

    assert set(DAEMON_POLICY.values()) <= set(POLICIES)
    assert DAEMON_POLICY["none"] == reference_policy()  # plain TCP: what speedups are over


def test_the_daemon_runs_the_default_policy_unless_told_otherwise():
    from dataclasses import fields

    from jitsched.config import DaemonConfig

    assert next(f.default for f in fields(DaemonConfig) if f.name == "policy") == default_policy()


def test_sim_command_runs_the_reference_unless_told_otherwise():
    from jitsched.cli import build_parser

    assert build_parser().parse_args(["sim", "w.json"]).policy == reference_policy()


def test_slot_schedule_pickles_by_columns_and_back_unchanged():
    import pickle

    from jitsched.policies.base import SlotSchedule

    flows = [("a", "t1", 0, 1, 3, np.array([1.0, 2.0])), ("a", "t2", 0, 2, 0, np.zeros(0)),
             ("b", "t", 2, 1, 5, [4.0]), ("c", "t", 1, 0, 0, np.array([7.5]))]
    sched = SlotSchedule(1.5, 0.1, flows, np.ones((3, 2)), np.full((3, 1), 2.0),
                         late=[{"job": "a", "transfer": "t1", "lateness_s": 0.2}], solve_s=0.3,
                         prio={("a", "t1"): 0, ("a", "t2"): 0, ("b", "t"): 4, ("gone", "x"): 9})
    back = pickle.loads(pickle.dumps(sched))
    assert [f[:5] for f in back.flows] == [f[:5] for f in flows]
    assert [list(f[5]) for f in back.flows] == [[1.0, 2.0], [], [4.0], [7.5]]
    # c has no rank, and a rank whose key is no flow survives too
    assert back.prio == sched.prio and ("c", "t") not in back.prio
    assert (back.epoch_s, back.slot_s, back.late, back.solve_s) == (1.5, 0.1, sched.late, 0.3)
    assert np.array_equal(back.leftover_egress, sched.leftover_egress)
    assert np.array_equal(back.leftover_ingress, sched.leftover_ingress)
    empty = pickle.loads(pickle.dumps(SlotSchedule(0.0, 0.1, [], np.zeros((2, 0)), np.zeros((2, 0)))))
    assert empty.flows == [] and empty.prio == {} and empty.leftover_egress.shape == (2, 0)


def test_an_option_a_policy_does_not_take_is_refused_with_those_it_takes():
    from jitsched.errors import ValidationError

    with pytest.raises(ValidationError, match=r"policy 'tensorflow': unknown option\(s\) alpha; it takes: none"):
        policies_base.make_policy("tensorflow", alpha=0.4)
    # a subclass's options class inherits its base's fields (jit-paper: JitOptions' slot_s)
    with pytest.raises(ValidationError, match=r"policy 'jit-paper': unknown option\(s\) nope, zzz; it takes: .*slot_s"):
        policies_base.make_policy("jit-paper", nope=1, zzz=2, slot_s=0.1)
    assert policies_base.make_policy("jit-paper", slot_s=0.2).slot_s == 0.2
    # a field the class fixes is no option (varys: Sincronia's recompute)
    with pytest.raises(ValidationError, match=r"policy 'varys': unknown option\(s\) recompute; it takes: background, bg_floor, madd, slot_s$"):
        policies_base.make_policy("varys", recompute="flows")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_is_built_from_its_declared_options(name):
    from dataclasses import fields, is_dataclass

    cls = POLICIES[name]
    assert is_dataclass(cls.Options) and cls.Options.__dataclass_params__.frozen
    declared = policies_base.option_names(cls)
    assert declared == tuple(f.name for f in fields(cls.Options) if f.init)
    # every declared option is passed on with the value given: its default, as a keyword
    defaults = cls.Options()
    pol = policies_base.make_policy(name, **{k: getattr(defaults, k) for k in declared})
    assert isinstance(pol, cls) and pol.options == defaults


def test_a_policy_refuses_another_policys_options_object():
    from jitsched.policies.sincronia import SincroniaOptions
    from jitsched.policies.tictac import TicTacPolicy

    with pytest.raises(TypeError, match="TicTacPolicy takes a TicTacOptions, got SincroniaOptions"):
        TicTacPolicy(SincroniaOptions())


@pytest.mark.parametrize("name, option, bad, why", [
    ("tictac", "mode", "toc", "mode: expected one of auto, tac, tic, got 'toc'"),
    ("tictac", "k_std", -1.0, "k_std: must be >= 0"),
    ("tictac", "slot_s", 0.0, "slot_s"),
    ("sincronia", "recompute", "never", "recompute: expected one of events, arrivals, flows, got 'never'"),
    ("sincronia", "background", "first", "background: expected one of coflows, last"),
    ("varys", "slot_s", float("nan"), "slot_s"),
])
def test_an_options_object_refuses_a_bad_value_naming_the_field(name, option, bad, why):
    from jitsched.errors import ValidationError

    with pytest.raises(ValidationError, match=why):
        POLICIES[name].Options(**{option: bad})
