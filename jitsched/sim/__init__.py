"""Flow-level event-driven simulation of DAG jobs and background traffic under a scheduling policy."""

from jitsched.sim.clock import Clock, EventQueue, VirtualClock
from jitsched.sim.engine import Simulator, simulate
from jitsched.sim.metrics import SimResult

__all__ = ["Clock", "EventQueue", "SimResult", "Simulator", "VirtualClock", "simulate"]
