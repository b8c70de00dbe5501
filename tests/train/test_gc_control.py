"""StepGC: no automatic collection during the steps, periodic young collections, state restored."""

from __future__ import annotations

import gc

import pytest

from trainserve.train.gc_control import StepGC


def test_disables_and_freezes_during_steps_then_restores():
    assert gc.isenabled()
    g = StepGC(every=3)
    g.start()
    try:
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 1000  # what existed before training is out of the collector's view
        for step in range(1, 10):
            g.after_step(step)
    finally:
        g.stop()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    s = g.summary()
    assert s["collections"] == 3 and s["every_steps"] == 3 and s["pause_ms_total"] >= 0


def test_cycles_made_during_training_are_collected_by_the_periodic_collection():
    class Node:
        pass

    g = StepGC(every=2)
    g.start()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        before = sum(isinstance(o, Node) for o in gc.get_objects())
        g.after_step(2)
        after = sum(isinstance(o, Node) for o in gc.get_objects())
    finally:
        g.stop()
    assert (before, after) == (2, 0)


def test_a_disabled_collector_stays_disabled_and_stop_without_start_is_harmless():
    g = StepGC()
    g.stop()
    assert gc.isenabled()
    gc.disable()
    try:
        g = StepGC()
        g.start()
        g.stop()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError, match="every=0"):
        StepGC(every=0)
